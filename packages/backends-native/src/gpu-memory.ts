import { loadBinding } from "./binding.js";

/** One compute process' memory on a GPU, as NVML lists it. */
export interface GpuProcessMemory {
  /** In the driver's PID namespace: inside a container it may differ from `process.pid`. */
  pid: number;
  /** Absent where NVML cannot say (some virtualised or WDDM setups). */
  usedBytes?: number;
}

/** One GPU's memory: free, used and total, and its compute processes' memory. */
export interface GpuMemory {
  /** NVML's index (PCI bus order). */
  index: number;
  uuid: string;
  freeBytes: number;
  usedBytes: number;
  totalBytes: number;
  /** Absent when NVML could not list them (`processesError` says why). */
  processes?: GpuProcessMemory[];
  processesError?: string;
}

/** What {@link sampleGpuMemory} found: every GPU's memory, or why there is none. */
export type GpuMemorySample = { available: true; gpus: GpuMemory[] } | { available: false; reason: string };

/**
 * Read every GPU's free, used and total memory (`nvmlDeviceGetMemoryInfo`) and each compute
 * process' memory (`nvmlDeviceGetComputeRunningProcesses_v3`, else `_v2`) through NVML loaded at
 * run time, off the JS thread. Never throws: without the addon, the driver or a GPU the answer is
 * `available: false` with the reason. A GPU whose memory NVML cannot read is left out.
 *
 * @example
 * const sample = await sampleGpuMemory();
 * if (sample.available) for (const gpu of sample.gpus) console.log(gpu.index, gpu.freeBytes, gpu.processes);
 */
export async function sampleGpuMemory(): Promise<GpuMemorySample> {
  let raw: Awaited<ReturnType<ReturnType<typeof loadBinding>["sampleGpuMemory"]>>;
  try {
    raw = await loadBinding().sampleGpuMemory();
  } catch (error) {
    return { available: false, reason: `the native addon did not load: ${(error as Error).message}` };
  }
  if (!raw.available) return { available: false, reason: raw.error };
  const gpus: GpuMemory[] = [];
  for (const g of raw.gpus) {
    const { freeBytes, totalBytes, usedBytes } = g;
    if (freeBytes.value === undefined || totalBytes.value === undefined || usedBytes.value === undefined) continue;
    gpus.push({
      index: g.index,
      uuid: g.uuid,
      freeBytes: freeBytes.value,
      usedBytes: usedBytes.value,
      totalBytes: totalBytes.value,
      ...(g.processes ? { processes: g.processes } : {}),
      ...(g.processesError !== undefined ? { processesError: g.processesError } : {}),
    });
  }
  return gpus.length > 0
    ? { available: true, gpus }
    : { available: false, reason: "NVML could not read any GPU's memory" };
}
