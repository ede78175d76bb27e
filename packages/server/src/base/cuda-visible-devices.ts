/**
 * The GPUs CUDA lets this process use, in CUDA's numbering: `gpus` are NVML's (every GPU of the
 * machine, by NVML index, with its UUID), `spec` is `CUDA_VISIBLE_DEVICES`. The result's position
 * is the CUDA ordinal (what `instance_group.gpus`, `cudaSharedMemoryRegister`'s `device_id` and the
 * server's GPU list use). Unset: every GPU in NVML's order (CUDA's too where all GPUs are the same
 * model, or with `CUDA_DEVICE_ORDER=PCI_BUS_ID`). Set: each comma-separated entry, an NVML index or
 * a UUID prefix (with or without `GPU-`), once each, up to the first entry that names none (CUDA
 * stops there too); empty, or a MIG entry first: none.
 */
export function cudaVisibleDevices<T extends { readonly index: number; readonly uuid: string }>(
  gpus: readonly T[],
  spec: string | undefined,
): T[] {
  if (spec === undefined) return [...gpus];
  const chosen: T[] = [];
  for (const entry of spec.split(",").map((e) => e.trim())) {
    const gpu = /^\d+$/.test(entry)
      ? gpus.find((g) => g.index === Number(entry))
      : entry.length > 0 && !entry.startsWith("MIG-") && !entry.startsWith("-")
        ? gpus.find((g) => g.uuid.startsWith(entry.startsWith("GPU-") ? entry : `GPU-${entry}`))
        : undefined;
    if (!gpu) break;
    if (!chosen.includes(gpu)) chosen.push(gpu);
  }
  return chosen;
}
