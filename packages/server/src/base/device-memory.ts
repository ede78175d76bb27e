/** One GPU's memory as a {@link DeviceMemoryReader} reads it. */
export interface DeviceMemoryReading {
  freeBytes: number;
  usedBytes: number;
  totalBytes: number;
  /** Each compute process' memory on the GPU (NVML's list); absent where it cannot be read. */
  processes?: readonly { pid: number; usedBytes?: number }[];
  /**
   * Bytes this process' allocator keeps cached on the GPU (the PyTorch caching allocator's reserved
   * less allocated): free for this process' next batch though the driver counts them used.
   */
  cachedBytes?: number;
}

/**
 * Where GPU memory figures come from (NVML and the PyTorch allocator in the server; a fixed table
 * in tests). Read by the GPU memory source, the GPU memory budget and the GPU memory admission.
 */
export interface DeviceMemoryReader {
  /** Every GPU's memory by CUDA ordinal; empty where there is no GPU or no NVML. Never rejects. */
  read(): Promise<ReadonlyMap<number, DeviceMemoryReading>>;
  /** Give this process' cached GPU memory back to the driver (`emptyCache`). Never rejects. */
  releaseCache(): Promise<void>;
}
