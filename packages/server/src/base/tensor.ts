import type { ProtocolDataType } from "@galley/proto";

/** A request, response or tensor parameter value. */
export type ParameterValue = string | number | bigint | boolean;

/** Parameters by name. */
export type Parameters = Record<string, ParameterValue>;

/**
 * A tensor as the core sees it: a datatype, a shape and the bytes that arrived (raw gRPC
 * contents, a slice of the binary HTTP body, a shared-memory region), little-endian and
 * row-major; BYTES elements are 4-byte-length-prefixed. `data` is a view, never a copy.
 */
export interface Tensor {
  name: string;
  datatype: ProtocolDataType;
  shape: number[];
  data: Uint8Array;
  parameters: Parameters;
  /**
   * The buffer under `data` belongs to this request alone (a binary HTTP body, a batch, a model
   * output), so it may be moved to a worker thread instead of copied. Moving detaches it here.
   */
  movable?: boolean;
  /**
   * The tensor's bytes are in a registered shared-memory region: an input whose `data` the core
   * reads from there before validating, or an output the core has written there (its `data` is
   * then empty and frontends send no contents for it).
   */
  sharedMemory?: SharedMemoryRef;
  /**
   * The tensor's bytes are on a GPU, not in `data` (which is then empty): a client's CUDA
   * shared-memory region read in place, or a model's output kept on its device for the next model
   * there (an ensemble step). Only a backend that said it takes such tensors on that device
   * (`BackendModel.deviceTensors`) is given one; everywhere else the core copies it to the host
   * first (see `hostTensor` in `base/tensor.ts`).
   */
  device?: DeviceTensor;
}

/**
 * A tensor's bytes in GPU memory. Reference-counted by its holder: whoever made it (the core for
 * a region, a backend for a kept output) hands it to one owner, which calls `release()` when the
 * last consumer is done; host copies are counted in `hostTransfers`.
 */
export interface DeviceTensor {
  /** The CUDA ordinal of the GPU that holds the bytes. */
  readonly deviceId: number;
  readonly byteSize: number;
  /**
   * Which code can run on it in place: `region` (client memory at `pointer`), or the name of the
   * backend that kept it (its `Backend.name`, e.g. `pytorch`), whose instances take it by `handle`.
   */
  readonly kind: string;
  /** The device address (client memory, valid while the request runs). */
  readonly pointer?: bigint;
  /** The backend's own handle (the torch addon's kept tensor). */
  readonly handle?: unknown;
  /**
   * Memory of another process (a client's CUDA region, a Python stub's tensor): the CUDA IPC handle
   * of its allocation and the offset there, with which a third process opens it in place.
   */
  readonly ipc?: { readonly handle: Uint8Array; readonly offset: number };
  /**
   * Deferred completion (issue 50): the CUDA IPC handle (64 bytes) of an event recorded after the
   * GPU work that writes these bytes, where that work may still run. Code that reads them in place
   * (`pointer`, `ipc`) waits for it first; `toHost` and `copyTo` wait by themselves.
   */
  readonly event?: Uint8Array;
  /**
   * Memory another process owns that may be read by GPU work still running after its request is
   * answered (a deferred batch): the memory is given back only once `done` settles. Absent where
   * the owner may reuse it as soon as the request ends (a client's region): no batch reading it
   * is deferred.
   */
  settleAfter?(done: Promise<unknown>): void;
  /** The bytes on the host: one device-to-host copy, made once (later calls share it). */
  toHost(): Promise<Uint8Array>;
  /**
   * One device-to-device copy to `pointer` (`byteSize` bytes of room there) on the same GPU, or on
   * GPU `deviceId` (direct between peers, staged by the driver otherwise, never through this
   * process's host memory); absent: only through the host.
   */
  copyTo?(pointer: bigint, byteSize: number, deviceId?: number): Promise<void>;
  /** Rows `[start, start + count)` of the first dimension, as a view on the device (a batch split per request). */
  rows?(start: number, count: number): DeviceTensor;
  /** Let the memory go now (a kept output); a no-op for client memory. Idempotent. */
  release(): void;
}

/** An empty `data` for tensors whose bytes are elsewhere (a device, a region). */
export const NO_BYTES: Uint8Array = new Uint8Array(0);

/** The tensor with its bytes on the host (one device-to-host copy when they are on a GPU); releases the device copy. */
export async function hostTensor(tensor: Tensor): Promise<Tensor> {
  const device = tensor.device;
  if (!device) return tensor;
  const data = await device.toHost();
  device.release();
  const { device: _, ...rest } = tensor;
  return { ...rest, data, movable: false };
}

/** The tensor's size in bytes, wherever its bytes are. */
export function byteSize(tensor: Tensor): number {
  return tensor.device ? tensor.device.byteSize : tensor.data.byteLength;
}

/** Product of the dimensions (1 for a scalar shape). */
export function elementCount(shape: readonly number[]): number {
  let count = 1;
  for (const d of shape) count *= d;
  return count;
}

/** Where a tensor lives in a registered region (the `shared_memory_*` parameters). */
export interface SharedMemoryRef {
  region: string;
  offset: number;
  byteSize: number;
}
