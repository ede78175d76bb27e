// Tensors that cross from one GPU to another (issue 55): a tensor made or registered on GPU a,
// read by a model whose instances all run on GPU b, is copied device to device into memory on b
// (one cuMemcpyPeer / libtorch copy between devices) instead of through host memory.
import { hostTransfers } from "../base/host-transfers.js";
import type { Logger } from "../base/log.js";
import type { DeviceTensor } from "../base/tensor.js";

/**
 * How bytes on GPU `from` reach GPU `to`: `same-gpu` (read in place, no copy), `peer` (the target
 * GPU reads the source's memory directly: `cuDeviceCanAccessPeer`, NVLink or PCIe peer-to-peer), or
 * `staged` (no peer access: the CUDA driver stages the copy through its own host buffers). Either
 * copy is one call of the driver's device-to-device copy; this process never sees host bytes.
 */
export type GpuCopyRoute = "same-gpu" | "peer" | "staged";

/**
 * The route of a copy from GPU `from` to GPU `to`, given `peerAccess[a][b]` (GPU `a` can read GPU
 * `b`'s memory, as `probeCuda` reports it); a pair the matrix does not cover counts as staged.
 */
export function gpuCopyRoute(from: number, to: number, peerAccess: readonly (readonly boolean[])[]): GpuCopyRoute {
  if (from === to) return "same-gpu";
  return peerAccess[to]?.[from] === true ? "peer" : "staged";
}

/** Device memory the copier allocated on one GPU (the native addon's `CudaMemory`). */
export interface GpuAllocation {
  readonly pointer: bigint;
  /** One device-to-host copy (a host consumer of the moved tensor). */
  read(offset: number, length: number): Promise<Uint8Array>;
  close(): void;
}

/** What {@link GpuCopies} needs of CUDA: allocations on a GPU and the peer matrix. */
export interface GpuCopyDriver {
  /** `byteSize` bytes on GPU `device` (`cuMemAlloc` in its primary context, which libtorch shares). */
  allocate(byteSize: number, device: number): Promise<GpuAllocation>;
  /** `peerAccess[a][b]`: GPU `a` reads GPU `b`'s memory directly (`probeCuda().peerAccess`). */
  peerAccess(): Promise<readonly (readonly boolean[])[]>;
}

/** A tensor moved to another GPU, and the function that frees it once the request is done. */
export interface MovedTensor {
  tensor: DeviceTensor;
  route: GpuCopyRoute;
  release: () => void;
}

/**
 * Moves device tensors between the GPUs of one server: memory allocated on the target GPU, one
 * device-to-device copy into it (the tensor's own `copyTo`, which takes a target on another GPU),
 * and a `region` tensor there that any model on that GPU reads in place. Bytes moved are counted
 * as `betweenGpus` for the model that reads them; none as host bytes.
 */
export class GpuCopies {
  readonly #driver: GpuCopyDriver;
  readonly #log: Pick<Logger, "info"> | undefined;
  #peers: Promise<readonly (readonly boolean[])[]> | undefined;
  /** The GPU pairs whose route was logged (`from>to`). */
  readonly #logged = new Set<string>();

  /** `log`: one line per pair of GPUs, at its first copy, saying how the copies go. */
  constructor(driver: GpuCopyDriver, log?: Pick<Logger, "info">) {
    this.#driver = driver;
    this.#log = log;
  }

  /** The route a copy from `from` to `to` takes on this machine. */
  async route(from: number, to: number): Promise<GpuCopyRoute> {
    this.#peers ??= this.#driver.peerAccess().catch(() => []);
    return gpuCopyRoute(from, to, await this.#peers);
  }

  /**
   * `tensor` copied to GPU `to` for `model`, or undefined where it cannot be (no device copy of its
   * own, or it is already there): the caller then takes it as it is or through the host.
   */
  async move(tensor: DeviceTensor, to: number, model: string): Promise<MovedTensor | undefined> {
    if (!tensor.copyTo || tensor.deviceId === to) return undefined;
    const route = await this.route(tensor.deviceId, to);
    const memory = await this.#driver.allocate(Math.max(tensor.byteSize, 1), to);
    try {
      await tensor.copyTo(memory.pointer, tensor.byteSize, to);
    } catch (error) {
      memory.close();
      throw error;
    }
    hostTransfers.record(model, { betweenGpus: tensor.byteSize });
    const pair = `${tensor.deviceId}>${to}`;
    if (!this.#logged.has(pair)) {
      this.#logged.add(pair);
      this.#log?.info(
        `tensors from GPU ${tensor.deviceId} to GPU ${to} are copied device to device: ${route === "peer" ? "peer to peer" : "staged by the CUDA driver (the GPUs are not peers)"}`,
      );
    }
    let host: Promise<Uint8Array> | undefined;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      memory.close();
    };
    const moved: DeviceTensor = {
      kind: "region",
      deviceId: to,
      byteSize: tensor.byteSize,
      pointer: memory.pointer,
      toHost: () => {
        host ??= memory.read(0, tensor.byteSize).then((data) => {
          hostTransfers.record(model, { deviceToHost: data.byteLength });
          return data;
        });
        return host;
      },
      // Released by the request that asked for the move, when it is done.
      release: () => {},
    };
    return { tensor: moved, route, release };
  }
}
