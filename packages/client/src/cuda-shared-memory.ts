// CUDA shared memory for Triton's CUDA shared-memory extension: device memory this process
// allocates, whose IPC handle (the 64 bytes of a cudaIpcMemHandle_t, as Triton's Python client's
// tritonclient.utils.cuda_shared_memory makes them) the server opens. The memory comes from
// @galley/backends-native (the CUDA driver loaded at run time), imported only when a region is made,
// so the client works without it.
import { randomBytes } from "node:crypto";
import type { InferenceClient } from "./client-types.js";
import { SharedRegion } from "./shared-region.js";

/** `sizeof(cudaIpcMemHandle_t)`. */
export const CUDA_IPC_HANDLE_BYTES = 64;

/** Device memory with an IPC handle (what @galley/backends-native's `allocateCudaMemory` returns). */
export interface CudaDeviceMemory {
  /** The 64-byte `cudaIpcMemHandle_t` another process opens. */
  readonly ipcHandle: Uint8Array | null;
  /** The device address in this process. */
  readonly pointer: bigint;
  read(offset: number, length: number): Promise<Uint8Array>;
  write(offset: number, data: ArrayBufferView): Promise<void>;
  close(): void;
}

/** Allocates device memory with an IPC handle; the default is @galley/backends-native's `allocateCudaMemory`. */
export type CudaAllocator = (byteSize: number, device: number) => Promise<CudaDeviceMemory>;

/** Options for {@link CudaSharedMemory.create}. */
export interface CudaSharedMemoryOptions {
  /** The CUDA device to allocate on (and that the server opens the handle on). Default 0. */
  device?: number;
  /** Register the region with this client's server (and unregister it on dispose). */
  client?: InferenceClient;
  /** The registration name; default a unique `galley-cuda-<pid>-<random>`. */
  name?: string;
  /** Where the memory comes from; default @galley/backends-native's `allocateCudaMemory`. */
  allocate?: CudaAllocator;
}

// The variable keeps bundlers and the type checker from requiring the optional package.
const NATIVE = "@galley/backends-native";

async function nativeAllocator(): Promise<CudaAllocator> {
  try {
    const native = (await import(NATIVE)) as { allocateCudaMemory: CudaAllocator };
    return native.allocateCudaMemory;
  } catch (error) {
    throw new Error(
      `CUDA shared memory needs ${NATIVE} (the CUDA driver is loaded through its addon): ${(error as Error).message}`,
      { cause: error },
    );
  }
}

const live = new Set<CudaDeviceMemory>();
let exitHooked = false;

/** Free every allocation still alive when the process exits (the driver would too; this keeps the order defined). */
function hookExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.once("exit", () => {
    for (const memory of live) {
      try {
        memory.close();
      } catch {
        // Exiting anyway.
      }
    }
    live.clear();
  });
}

/**
 * A CUDA shared-memory region: device memory allocated here, optionally registered with a
 * server, freed (and unregistered) on dispose. Its handle has the format of Triton's Python client
 * (`cuda_shared_memory.get_raw_handle`), so a Triton server or any Triton client tooling can use it.
 *
 * @example
 * await using region = await CudaSharedMemory.create(128, { device: 0, client });
 * await region.write(0, tensor.int32([1, 16], a).data);
 * await region.write(64, tensor.int32([1, 16], b).data);
 * await client.infer("simple", {
 *   inputs: { INPUT0: region.input("INT32", [1, 16], 0, 64), INPUT1: region.input("INT32", [1, 16], 64, 64) },
 *   outputs: [region.output("OUTPUT0", 0, 64)],
 * });
 * const sum = new Int32Array((await region.read(0, 64)).slice().buffer);
 */
export class CudaSharedMemory extends SharedRegion implements AsyncDisposable {
  private constructor(
    name: string,
    byteSize: number,
    /** The device the memory is on (sent as `device_id`). */
    readonly device: number,
    /** The 64 raw bytes of the `cudaIpcMemHandle_t` (gRPC's `raw_handle`). */
    readonly rawHandle: Uint8Array,
    readonly memory: CudaDeviceMemory,
    readonly client: InferenceClient | undefined,
  ) {
    super(name, byteSize, "CUDA region", memory);
  }

  /**
   * Allocate `byteSize` bytes on `options.device` (default 0) and, with `options.client`, register
   * them. Rejects when the size or device is not a valid integer, when the addon or CUDA driver
   * is unavailable (the allocator's message), or with the server's registration error (the memory
   * is then freed).
   */
  static async create(byteSize: number, options: CudaSharedMemoryOptions = {}): Promise<CudaSharedMemory> {
    if (!Number.isSafeInteger(byteSize) || byteSize <= 0) {
      throw new RangeError(`byteSize must be a positive integer, got ${byteSize}`);
    }
    const device = options.device ?? 0;
    if (!Number.isSafeInteger(device) || device < 0) {
      throw new RangeError(`device must be a non-negative integer, got ${device}`);
    }
    const allocate = options.allocate ?? (await nativeAllocator());
    const memory = await allocate(byteSize, device);
    const handle = memory.ipcHandle;
    if (!handle || handle.byteLength !== CUDA_IPC_HANDLE_BYTES) {
      memory.close();
      throw new Error(`the allocator returned no ${CUDA_IPC_HANDLE_BYTES}-byte CUDA IPC handle`);
    }
    hookExit();
    live.add(memory);
    const name = options.name ?? `galley-cuda-${process.pid}-${randomBytes(6).toString("hex")}`;
    const region = new CudaSharedMemory(name, byteSize, device, handle, memory, options.client);
    if (options.client) {
      try {
        await options.client.registerCudaSharedMemory(name, handle, device, byteSize);
      } catch (error) {
        region.#release();
        throw error;
      }
    }
    return region;
  }

  /** The handle as Triton's HTTP API takes it (`raw_handle.b64`; Python's `get_raw_handle`). */
  rawHandleBase64(): string {
    return Buffer.from(this.rawHandle).toString("base64");
  }

  /** Unregister (when registered through a client) and free the memory. Idempotent. */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    try {
      if (this.client) await this.client.unregisterCudaSharedMemory(this.name).catch(() => undefined);
    } finally {
      this.#release();
    }
  }

  #release(): void {
    this.markDisposed();
    live.delete(this.memory);
    try {
      this.memory.close();
    } catch {
      // Freed by the driver at exit at the latest.
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}
