import { sampleGpus } from "@galley/backends-native";
import { cudaVisibleDevices } from "../../base/cuda-visible-devices.js";
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
      const gpus = cudaVisibleDevices(sample.gpus, spec);
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
