/**
 * Galley's native addon (node-addon-api). It is loaded lazily, on first use, and the server runs
 * without it. It finds the CUDA driver at run time and maps POSIX shared memory without copies;
 * CUDA execution and TensorRT build on the same loader.
 *
 * @packageDocumentation
 */

// For other Galley packages.
export { type Binding, loadBinding } from "./binding.js";
export { type CudaProbe, probeCuda } from "./cuda.js";
export {
  type MapSharedMemoryOptions,
  mapSharedMemory,
  type SharedMapping,
  type SharedMemoryMappingSupport,
  sharedMemoryMapping,
} from "./shared-memory.js";
