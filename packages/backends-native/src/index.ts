/**
 * Galley's native addon (node-addon-api). It is loaded lazily, on first use, and the server runs
 * without it. Today it finds the CUDA driver at run time; zero-copy shared memory, CUDA execution
 * and TensorRT build on the same loader.
 *
 * @packageDocumentation
 */

// For other Galley packages.
export { type Binding, loadBinding } from "./binding.js";
export { type CudaProbe, probeCuda } from "./cuda.js";
