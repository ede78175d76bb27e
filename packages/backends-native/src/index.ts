/**
 * Galley's native addon (node-addon-api). It is loaded lazily, on first use, and the server runs
 * without it. It finds the CUDA driver at run time, maps POSIX shared memory without copies and
 * reads GPU metrics through NVML (`native/memory/`); the PyTorch backend's addon is `./torch` (`native/torch/`).
 *
 * @packageDocumentation
 */

// For other Galley packages.
export {
  type Binding,
  loadBinding,
  type NvmlRawMemorySample,
  type NvmlRawReading,
  type NvmlRawSample,
  type RawCudaMemory,
} from "./binding.js";
export { type CudaProbe, probeCuda } from "./cuda.js";
export {
  allocateCudaMemory,
  CUDA_IPC_HANDLE_BYTES,
  type CudaMemory,
  exportCudaIpcHandle,
  openCudaIpcHandle,
  waitCudaIpcEvent,
} from "./cuda-memory.js";
export { type GpuMemory, type GpuMemorySample, type GpuProcessMemory, sampleGpuMemory } from "./gpu-memory.js";
export { type GpuField, type GpuReadings, type GpuSample, sampleGpus } from "./gpu-metrics.js";
export {
  type MapSharedMemoryOptions,
  mapSharedMemory,
  type SharedMapping,
  type SharedMemoryMappingSupport,
  sharedMemoryMapping,
} from "./shared-memory.js";
