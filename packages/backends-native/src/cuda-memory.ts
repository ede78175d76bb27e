import { type Binding, loadBinding, type RawCudaMemory } from "./binding.js";

/** The size of a `cudaIpcMemHandle_t` (CUDA's `CU_IPC_HANDLE_SIZE`), as Triton's clients send it. */
export const CUDA_IPC_HANDLE_BYTES = 64;

/**
 * Device memory reached through the CUDA driver: opened from another process's IPC handle
 * ({@link openCudaIpcHandle}) or allocated here ({@link allocateCudaMemory}). Copies run off the
 * JS thread; the memory is released by {@link CudaMemory.close} or when this object is collected.
 */
export interface CudaMemory {
  /** The device whose primary context opened or allocated the memory. */
  readonly device: number;
  /** The device the memory lives on (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`); differs from `device` only across peers. */
  readonly pointerDevice: number;
  /** Bytes from `pointer` to the end of its allocation (`cuMemGetAddressRange`). */
  readonly byteSize: number;
  /** The device address in this process, for code that runs on the memory in place (e.g. libtorch's `from_blob`). */
  readonly pointer: bigint;
  /** The 64-byte `cudaIpcMemHandle_t` of memory allocated here; null for memory opened from a handle. */
  readonly ipcHandle: Uint8Array | null;
  /** Copy `length` bytes from `offset` into a new host buffer (one `cuMemcpyDtoH`). */
  read(offset: number, length: number): Promise<Uint8Array>;
  /** Copy `data` to `offset` (one `cuMemcpyHtoD`); resolves once the bytes are on the device. */
  write(offset: number, data: ArrayBufferView): Promise<void>;
  /**
   * Copy `length` bytes from `offset` to device memory at `target` on this memory's GPU (one
   * `cuMemcpyDtoD`), or on GPU `targetDevice` (one `cuMemcpyPeer`: direct between peers, staged by
   * the driver otherwise); resolves once the bytes are there. The caller holds `target` for the copy.
   */
  copyTo(offset: number, target: bigint, length: number, targetDevice?: number): Promise<void>;
  /** Close the IPC mapping or free the allocation; idempotent. Copies in flight finish first. */
  close(): void;
}

function wrap(raw: RawCudaMemory): CudaMemory {
  const fail = (why: string) => new RangeError(`CUDA memory on device ${raw.device}: ${why}`);
  const range = (offset: number, length: number) => {
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0) {
      throw fail(`offset and length must be non-negative integers, got ${String(offset)} and ${String(length)}`);
    }
    if (offset + length > raw.byteSize) {
      throw fail(`${length} bytes at offset ${offset} are past the end of the memory (${raw.byteSize} bytes)`);
    }
  };
  return Object.freeze({
    device: raw.device,
    pointerDevice: raw.pointerDevice,
    byteSize: raw.byteSize,
    pointer: raw.pointer,
    ipcHandle: raw.ipcHandle,
    async read(offset: number, length: number) {
      range(offset, length);
      return raw.read(offset, length);
    },
    async write(offset: number, data: ArrayBufferView) {
      if (!ArrayBuffer.isView(data))
        throw new TypeError("CUDA memory write: data must be a TypedArray, DataView or Buffer");
      range(offset, data.byteLength);
      await raw.write(offset, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    },
    async copyTo(offset: number, target: bigint, length: number, targetDevice?: number) {
      if (typeof target !== "bigint" || target <= 0n)
        throw fail(`the target must be a device address (a positive bigint), got ${String(target)}`);
      range(offset, length);
      if (targetDevice !== undefined) checkDevice(targetDevice, fail);
      await raw.copyTo(offset, target, length, targetDevice);
    },
    close: () => raw.close(),
  });
}

function binding(fail: (why: string, cause?: unknown) => Error): Binding {
  try {
    return loadBinding();
  } catch (error) {
    throw fail((error as Error).message, error);
  }
}

function checkDevice(device: number, fail: (why: string) => Error): void {
  if (!Number.isSafeInteger(device) || device < 0 || device > 0x7fffffff) {
    throw fail(`the device must be a non-negative integer, got ${String(device)}`);
  }
}

/**
 * Open a CUDA IPC handle (the 64 bytes of a `cudaIpcMemHandle_t` made by another process with
 * `cudaIpcGetMemHandle`) on `device`, as Triton's server does for a CUDA shared-memory region.
 *
 * Rejects with `Unable to open CUDA IPC handle on device <d>: <why>`: no addon, no CUDA driver, no
 * such device, a handle the driver refuses (e.g. one made in this very process) — never crashes.
 *
 * @example
 * const memory = await openCudaIpcHandle(handle, 0);
 * const bytes = await memory.read(0, 1024);
 * memory.close();
 */
export async function openCudaIpcHandle(handle: Uint8Array, device: number): Promise<CudaMemory> {
  const fail = (why: string, cause?: unknown) =>
    new Error(`Unable to open CUDA IPC handle on device ${String(device)}: ${why}`, cause ? { cause } : undefined);
  if (!(handle instanceof Uint8Array) || handle.byteLength !== CUDA_IPC_HANDLE_BYTES) {
    throw fail(`the handle must be ${CUDA_IPC_HANDLE_BYTES} bytes, got ${String(handle?.byteLength)}`);
  }
  checkDevice(device, fail);
  try {
    return wrap(await binding(fail).cudaIpcOpen(handle, device));
  } catch (error) {
    if ((error as Error).message.startsWith("Unable to open CUDA IPC handle")) throw error;
    throw fail((error as Error).message, error);
  }
}

/**
 * Allocate `byteSize` bytes on `device` (`cuMemAlloc`) with an IPC handle another process can
 * open (`cuIpcGetMemHandle`): the memory behind a client's CUDA shared-memory region.
 *
 * Rejects with `Unable to allocate <n> bytes on CUDA device <d>: <why>`.
 *
 * @example
 * const memory = await allocateCudaMemory(64, 0);
 * await memory.write(0, new Int32Array(16).fill(1));
 * console.log(Buffer.from(memory.ipcHandle!).toString("base64"));
 */
export async function allocateCudaMemory(byteSize: number, device: number): Promise<CudaMemory> {
  const fail = (why: string, cause?: unknown) =>
    new Error(
      `Unable to allocate ${String(byteSize)} bytes on CUDA device ${String(device)}: ${why}`,
      cause ? { cause } : undefined,
    );
  if (!Number.isSafeInteger(byteSize) || byteSize <= 0) throw fail("the size must be a positive integer");
  checkDevice(device, fail);
  try {
    return wrap(await binding(fail).cudaAlloc(byteSize, device));
  } catch (error) {
    if ((error as Error).message.startsWith("Unable to allocate")) throw error;
    throw fail((error as Error).message, error);
  }
}

/**
 * The CUDA IPC handle of the allocation that holds `pointer` on `device` — device memory this
 * process got from another library (a libtorch tensor, from `cudaMalloc`) — and the pointer's
 * offset in it, so that another process maps that very memory with {@link openCudaIpcHandle}.
 *
 * Rejects with `Unable to export CUDA memory on device <d>: <why>` (memory the driver cannot
 * share, e.g. from `cudaMallocAsync` or virtual-memory pools, or no driver).
 */
export async function exportCudaIpcHandle(
  pointer: bigint,
  device: number,
): Promise<{ handle: Uint8Array; offset: number; allocationSize: number }> {
  const fail = (why: string, cause?: unknown) =>
    new Error(`Unable to export CUDA memory on device ${String(device)}: ${why}`, cause ? { cause } : undefined);
  if (typeof pointer !== "bigint" || pointer <= 0n) throw fail("the pointer must be a device address");
  checkDevice(device, fail);
  try {
    return await binding(fail).cudaExport(pointer, device);
  } catch (error) {
    if ((error as Error).message.startsWith("Unable to export")) throw error;
    throw fail((error as Error).message, error);
  }
}

/**
 * Settles once the work another process recorded a CUDA event after is done: `handle` is the
 * event's 64-byte IPC handle (`cudaIpcGetEventHandle` there, an event made with
 * `cudaEventInterprocess`). The host waits on a worker thread; the event is opened for the wait
 * and closed after. Memory that process wrote may be read once this resolves.
 *
 * Rejects with `Unable to wait for a CUDA event on device <d>: <why>`.
 */
export async function waitCudaIpcEvent(handle: Uint8Array, device: number): Promise<void> {
  const fail = (why: string, cause?: unknown) =>
    new Error(`Unable to wait for a CUDA event on device ${String(device)}: ${why}`, cause ? { cause } : undefined);
  if (!(handle instanceof Uint8Array) || handle.byteLength !== 64) {
    throw fail("a CUDA IPC event handle is a 64-byte Uint8Array");
  }
  checkDevice(device, fail);
  try {
    await binding(fail).cudaWaitEvent(handle, device);
  } catch (error) {
    if ((error as Error).message.startsWith("Unable to wait")) throw error;
    throw fail((error as Error).message, error);
  }
}
