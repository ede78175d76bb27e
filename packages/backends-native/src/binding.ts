import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

/** The raw addon, as `native/memory/addon.cc` exports it. Only this package's wrappers use it. */
export interface Binding {
  /** Bumped whenever the exports below change shape. */
  abiVersion: number;
  probeCuda(): Promise<{
    available: boolean;
    driverVersion: number;
    deviceCount: number;
    error: string;
    peerAccess: boolean[][];
  }>;
  /**
   * mmap `byteLength` bytes of `path` from `offset` (any offset: aligned to a page inside),
   * read-write and MAP_SHARED; with `create`, O_CREAT|O_EXCL (0600) and ftruncate to
   * offset + byteLength. Throws `Unable to map shared memory '<path>': <why>`. `unmap(buffer)`
   * detaches `buffer` and munmaps, once; collecting `buffer` munmaps too, once.
   */
  mapSharedMemory(
    path: string,
    byteLength: number,
    offset: number,
    create: boolean,
  ): { buffer: ArrayBuffer; unmap(buffer: ArrayBuffer): void };
  /**
   * One NVML reading of every GPU (libnvidia-ml.so.1 loaded at run time, off the JS thread).
   * Never rejects for a missing driver or GPU: `available` false and `error` say why. Each
   * reading is `{ value }` or `{ error }` on its own (a card without power readings).
   */
  sampleGpus(): Promise<NvmlRawSample>;
  /**
   * Every GPU's free, used and total memory and its compute processes' memory
   * (nvmlDeviceGetMemoryInfo, nvmlDeviceGetComputeRunningProcesses_v3 or _v2), off the JS thread.
   * Never rejects for a missing driver or GPU: `available` false and `error` say why.
   */
  sampleGpuMemory(): Promise<NvmlRawMemorySample>;
  /**
   * cuIpcOpenMemHandle of a 64-byte `cudaIpcMemHandle_t` in `device`'s primary context, off the JS
   * thread. Rejects with the driver's error (`cuIpcOpenMemHandle failed: CUDA_ERROR_... (...)`) or
   * why the driver is unavailable; throws a TypeError/RangeError for malformed arguments.
   */
  cudaIpcOpen(handle: Uint8Array, device: number): Promise<RawCudaMemory>;
  /** cuMemAlloc of `byteSize` (> 0) bytes on `device`, with its IPC handle; rejects as cudaIpcOpen. */
  cudaAlloc(byteSize: number, device: number): Promise<RawCudaMemory>;
  /** cuMemGetAddressRange + cuIpcGetMemHandle of device memory this process got elsewhere; rejects as cudaIpcOpen. */
  cudaExport(pointer: bigint, device: number): Promise<{ handle: Uint8Array; offset: number; allocationSize: number }>;
  /** cuIpcOpenEventHandle + cuEventSynchronize of another process's 64-byte event handle, off the JS thread. */
  cudaWaitEvent(handle: Uint8Array, device: number): Promise<void>;
}

/** Device memory as `cudaIpcOpen`/`cudaAlloc` resolve it (see native/memory/cuda_memory.h). */
export interface RawCudaMemory {
  device: number;
  pointerDevice: number;
  byteSize: number;
  pointer: bigint;
  /** The 64-byte handle of an allocation; null for memory opened from a handle. */
  ipcHandle: Uint8Array | null;
  read(offset: number, length: number): Promise<Uint8Array>;
  write(offset: number, data: Uint8Array): Promise<void>;
  copyTo(offset: number, target: bigint, length: number, targetDevice?: number): Promise<void>;
  close(): void;
}

/** A reading as the addon returns it: a value, or why NVML could not give one. */
export type NvmlRawReading = { value: number; error?: undefined } | { error: string; value?: undefined };

/** What `sampleGpus()` resolves with. */
export interface NvmlRawSample {
  available: boolean;
  error: string;
  driverVersion: string;
  gpus: {
    index: number;
    uuid: string;
    name: string;
    utilizationPercent: NvmlRawReading;
    memoryTotalBytes: NvmlRawReading;
    memoryUsedBytes: NvmlRawReading;
    powerUsageMilliwatts: NvmlRawReading;
    powerLimitMilliwatts: NvmlRawReading;
    energyMillijoules: NvmlRawReading;
  }[];
}

/** What `sampleGpuMemory()` resolves with. */
export interface NvmlRawMemorySample {
  available: boolean;
  error: string;
  gpus: {
    index: number;
    uuid: string;
    freeBytes: NvmlRawReading;
    totalBytes: NvmlRawReading;
    usedBytes: NvmlRawReading;
    /** Absent when NVML could not list them (`processesError` says why); `usedBytes` absent where NVML cannot say. */
    processes?: { pid: number; usedBytes?: number }[];
    processesError?: string;
  }[];
}

/** The ABI these wrappers were written against. */
export const BINDING_ABI_VERSION = 7;

/** Where the addon may be: an explicit override first, then node-gyp's build folders. */
export function bindingCandidates(): string[] {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const fromEnv = process.env.GALLEY_NATIVE_BINDING;
  return [
    ...(fromEnv ? [fromEnv] : []),
    `${root}build/Release/galley_native.node`,
    `${root}build/Debug/galley_native.node`,
  ];
}

/**
 * Require the first of `candidates` that loads and has `abiVersion`; otherwise throw one error
 * that names `what`, lists every attempt and ends with `hint` (what to build or install).
 */
export function requireAddon<T extends { abiVersion: number }>(
  candidates: readonly string[],
  abiVersion: number,
  what: string,
  hint: readonly string[],
): T {
  const require = createRequire(import.meta.url);
  const failures: string[] = [];
  for (const path of candidates) {
    try {
      const binding = require(path) as T;
      if (binding.abiVersion === abiVersion) return binding;
      failures.push(`${path}: ABI ${binding.abiVersion}, expected ${abiVersion} (stale build)`);
    } catch (error) {
      failures.push(`${path}: ${(error as Error).message.split("\n")[0]}`);
    }
  }
  throw new Error([`Could not load ${what}. Tried:`, ...failures.map((f) => `  - ${f}`), ...hint].join("\n"));
}

let cached: Binding | undefined;

/**
 * Load the addon on first use. Tries each candidate in order and, if none loads, throws one
 * error that lists every attempt and says how to build it. Nothing is loaded at import time, so
 * the server runs without the addon.
 */
export function loadBinding(candidates: string[] = bindingCandidates()): Binding {
  cached ??= requireAddon<Binding>(candidates, BINDING_ABI_VERSION, "Galley's native addon (@galley/backends-native)", [
    "Build it with `npm rebuild @galley/backends-native` where it is installed (needs a C++17 compiler, make and",
    "python3), or `npm run build -w @galley/backends-native` in Galley's repository; or point GALLEY_NATIVE_BINDING",
    "at a built galley_native.node.",
  ]);
  return cached;
}
