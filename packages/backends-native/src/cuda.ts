import { loadBinding } from "./binding.js";

/** What {@link probeCuda} found. */
export interface CudaProbe {
  /** The CUDA driver loaded, initialised and reports at least one device. */
  available: boolean;
  /** The driver's CUDA version as 1000 × major + 10 × minor (13000 is CUDA 13.0); 0 if unknown. */
  driverVersion: number;
  deviceCount: number;
  /** Why CUDA is unavailable (for logs and error messages); empty when available. */
  error: string;
  /**
   * `peerAccess[a][b]`: GPU `a` reads GPU `b`'s memory directly (`cuDeviceCanAccessPeer`; true on
   * the diagonal), so a copy from `b` to `a` is a peer copy; without it the driver stages the copy
   * (still device to device for this process). Empty when CUDA is unavailable.
   */
  peerAccess: boolean[][];
}

/**
 * Find the CUDA driver at run time (dlopen of `libcuda.so.1`, then `cuInit`), off the JS thread.
 * Never throws for a missing GPU: the answer says why CUDA is unavailable.
 *
 * @example
 * const cuda = await probeCuda();
 * console.log(cuda.available ? `${cuda.deviceCount} GPU(s)` : `CPU only: ${cuda.error}`);
 */
export async function probeCuda(): Promise<CudaProbe> {
  return loadBinding().probeCuda();
}
