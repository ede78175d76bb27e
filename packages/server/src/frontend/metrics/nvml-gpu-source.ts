import { type GpuReadings, sampleGpus } from "@galley/backends-native";
import type { GpuMetricsSource } from "./gpu-metrics.js";

/**
 * GPU readings from NVML (through the native addon, loaded on first use), limited to the GPUs
 * `CUDA_VISIBLE_DEVICES` lets this process use, as Triton reports only CUDA-visible GPUs.
 *
 * @internal
 */
export function nvmlGpuSource(env: NodeJS.ProcessEnv = process.env): GpuMetricsSource {
  return {
    async sample() {
      const sample = await sampleGpus();
      if (!sample.available) return sample;
      const spec = env.CUDA_VISIBLE_DEVICES;
      const gpus = cudaVisibleGpus(sample.gpus, spec);
      if (gpus.length === 0) {
        return {
          available: false,
          reason: `CUDA_VISIBLE_DEVICES='${spec}' leaves none of ${sample.gpus.length} GPU(s)`,
        };
      }
      return { ...sample, gpus };
    },
  };
}

/**
 * The GPUs `CUDA_VISIBLE_DEVICES` (`spec`) names: all when unset; otherwise each comma-separated
 * entry, an index or a `GPU-` UUID prefix, up to the first entry that names none (CUDA stops
 * there too). Indexes are NVML's (PCI bus order): the same as CUDA's with
 * `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and on machines of one GPU model. MIG entries name no GPU here.
 *
 * @internal
 */
export function cudaVisibleGpus(gpus: readonly GpuReadings[], spec: string | undefined): GpuReadings[] {
  if (spec === undefined) return [...gpus];
  const chosen: GpuReadings[] = [];
  for (const entry of spec.split(",").map((e) => e.trim())) {
    const gpu = /^\d+$/.test(entry)
      ? gpus.find((g) => g.index === Number(entry))
      : entry.startsWith("GPU-")
        ? gpus.find((g) => g.uuid.startsWith(entry))
        : undefined;
    if (!gpu) break;
    if (!chosen.includes(gpu)) chosen.push(gpu);
  }
  return chosen;
}
