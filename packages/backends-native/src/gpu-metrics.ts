import { loadBinding, type NvmlRawReading } from "./binding.js";

/** The readings of one GPU that NVML may give or refuse, each on its own. */
export type GpuField =
  | "utilization"
  | "memoryTotalBytes"
  | "memoryUsedBytes"
  | "powerUsageWatts"
  | "powerLimitWatts"
  | "energyJoules";

/**
 * One GPU's readings, in the units Triton's metrics use. A field NVML could not read (a card
 * without power readings, a permission it lacks) is absent, and `errors` says why.
 */
export interface GpuReadings {
  /** NVML's index (PCI bus order; CUDA's order may differ). */
  index: number;
  /** `GPU-xxxxxxxx-xxxx-...`, as nvidia-smi prints it and Triton's `gpu_uuid` label carries it. */
  uuid: string;
  /** The product name (`NVIDIA H200`); empty if NVML could not say. */
  name: string;
  /** Fraction of the last sample period (1/6 s to 1 s, by card) in which a kernel ran, 0.0–1.0. */
  utilization?: number;
  memoryTotalBytes?: number;
  memoryUsedBytes?: number;
  powerUsageWatts?: number;
  /** The power management limit (nvidia-smi's `power.limit`); the enforced limit where that is unreadable. */
  powerLimitWatts?: number;
  /** Energy used since the driver was last loaded (a running total, not since this process started). */
  energyJoules?: number;
  /** Why each absent field is absent: NVML's error text. */
  errors: Partial<Record<GpuField, string>>;
}

/** What {@link sampleGpus} found: every GPU's readings, or why there are none. */
export type GpuSample =
  | { available: true; driverVersion: string; gpus: GpuReadings[] }
  | { available: false; reason: string };

/**
 * Read every GPU's utilisation, memory, power and energy through NVML, loaded at run time
 * (dlopen of `libnvidia-ml.so.1`, or the file `GALLEY_NVML_LIBRARY` names), off the JS thread.
 * Never throws: without the addon, the driver or a GPU the answer is `available: false` with the
 * reason. NVML stays loaded once it initialised, so later samples cost a few driver calls.
 *
 * @example
 * const sample = await sampleGpus();
 * if (sample.available) for (const gpu of sample.gpus) console.log(gpu.uuid, gpu.utilization, gpu.powerUsageWatts);
 * else console.log(`no GPU metrics: ${sample.reason}`);
 */
export async function sampleGpus(): Promise<GpuSample> {
  let raw: Awaited<ReturnType<ReturnType<typeof loadBinding>["sampleGpus"]>>;
  try {
    raw = await loadBinding().sampleGpus();
  } catch (error) {
    // The whole message, as sharedMemoryMapping() and torchStatus() give it: every path tried and the hint.
    return { available: false, reason: `the native addon did not load: ${(error as Error).message}` };
  }
  if (!raw.available) return { available: false, reason: raw.error };
  return {
    available: true,
    driverVersion: raw.driverVersion,
    gpus: raw.gpus.map((g) => {
      const gpu: GpuReadings = { index: g.index, uuid: g.uuid, name: g.name, errors: {} };
      // Divided, not multiplied by 0.001: 123456 mW reads 123.456 W exactly as written.
      const read = (field: GpuField, reading: NvmlRawReading, per: number) => {
        if (reading.value !== undefined) gpu[field] = reading.value / per;
        else gpu.errors[field] = reading.error;
      };
      read("utilization", g.utilizationPercent, 100);
      read("memoryTotalBytes", g.memoryTotalBytes, 1);
      read("memoryUsedBytes", g.memoryUsedBytes, 1);
      read("powerUsageWatts", g.powerUsageMilliwatts, 1000);
      read("powerLimitWatts", g.powerLimitMilliwatts, 1000);
      read("energyJoules", g.energyMillijoules, 1000);
      return gpu;
    }),
  };
}
