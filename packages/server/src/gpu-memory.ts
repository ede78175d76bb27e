import { type GpuMemory, sampleGpuMemory } from "@galley/backends-native";
import { cudaVisibleDevices } from "./base/cuda-visible-devices.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "./base/device-memory.js";

/** What the torch addon's module offers for GPU memory (imported only once a PyTorch model loaded it). */
interface TorchMemory {
  torchCudaMemory(device: number): { allocatedBytes: number; reservedBytes: number } | undefined;
  torchEmptyCache(): Promise<void>;
}

/**
 * The server's GPU memory figures: NVML per GPU and per process (free, used, total, each compute
 * process' bytes), with what the PyTorch caching allocator of this process keeps cached on each
 * GPU once a PyTorch model has loaded libtorch. NVML numbers GPUs in PCI bus order and CUDA in its
 * own: a GPU's CUDA ordinal is found through `CUDA_VISIBLE_DEVICES` (indexes or `GPU-` UUIDs, as
 * CUDA reads it); without it, the orders are taken to agree (they do where all GPUs are the same
 * model, or with `CUDA_DEVICE_ORDER=PCI_BUS_ID`). Never rejects: without NVML the map is empty.
 */
export function nvmlMemoryReader(visible: string | undefined = process.env.CUDA_VISIBLE_DEVICES): DeviceMemoryReader {
  let torch: Promise<TorchMemory | undefined> | undefined;
  const torchModule = () => {
    // A variable specifier: the server builds and runs without the torch addon's module.
    const name = "@galley/backends-native/torch";
    torch ??= (import(name) as Promise<TorchMemory>).catch(() => undefined);
    return torch;
  };
  return {
    async read() {
      const sample = await sampleGpuMemory();
      const out = new Map<number, DeviceMemoryReading>();
      if (!sample.available) return out;
      const allocator = await torchModule();
      for (const [ordinal, gpu] of cudaOrder(sample.gpus, visible)) {
        const stats = cachedOf(allocator, ordinal);
        out.set(ordinal, {
          freeBytes: gpu.freeBytes,
          usedBytes: gpu.usedBytes,
          totalBytes: gpu.totalBytes,
          ...(gpu.processes ? { processes: gpu.processes } : {}),
          ...(stats ? { cachedBytes: Math.max(0, stats.reservedBytes - stats.allocatedBytes) } : {}),
        });
      }
      return out;
    },
    async releaseCache() {
      await (await torchModule())?.torchEmptyCache().catch(() => undefined);
    },
  };
}

/** The allocator's figures for a GPU; undefined where there is no allocator or it cannot say (never throws). */
function cachedOf(allocator: TorchMemory | undefined, ordinal: number) {
  try {
    return allocator?.torchCudaMemory(ordinal);
  } catch {
    return undefined;
  }
}

/** NVML's GPUs by CUDA ordinal, as `CUDA_VISIBLE_DEVICES` orders them (see {@link cudaVisibleDevices}). */
export function cudaOrder(gpus: readonly GpuMemory[], visible: string | undefined): Map<number, GpuMemory> {
  return new Map(cudaVisibleDevices(gpus, visible).entries());
}
