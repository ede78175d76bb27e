/** Bytes a model's tensors moved across the host boundary, and bytes that stayed on a GPU. */
export interface HostTransferCounts {
  /** Host memory → GPU (inputs staged for a GPU instance, outputs written into a CUDA region through the host). */
  hostToDevice: number;
  /** GPU → host memory (outputs returned as bytes, a kept tensor or a CUDA region read to the host). */
  deviceToHost: number;
  /** Input and output bytes that a GPU model used or wrote on the device without crossing the host. */
  onDevice: number;
  /** Input bytes copied from another GPU for a model on this one, device to device (peer or driver-staged). */
  betweenGpus: number;
}

/** A {@link HostTransfers} reading: per model, and the sum. */
export interface HostTransferSnapshot {
  total: HostTransferCounts;
  models: Record<string, HostTransferCounts>;
}

const zero = (): HostTransferCounts => ({ hostToDevice: 0, deviceToHost: 0, onDevice: 0, betweenGpus: 0 });

/**
 * Counters of the bytes that crossed between host and GPU memory, by model (issue 19): the
 * PyTorch backend adds its staging copies, the core its CUDA shared-memory copies and the host
 * copies of tensors kept on a GPU. A CPU model's counts stay 0; a chain of GPU models that hands
 * its tensors over on the device adds only `onDevice`. One set per process ({@link hostTransfers}),
 * as one Galley process serves one machine; read it with `snapshot()` (tests and the GPU benchmark
 * take the difference of two readings).
 */
export class HostTransfers {
  readonly #models = new Map<string, HostTransferCounts>();

  /** Add bytes for `model` (negative or non-finite amounts are ignored). */
  record(model: string, counts: Partial<HostTransferCounts>): void {
    let entry = this.#models.get(model);
    if (!entry) {
      entry = zero();
      this.#models.set(model, entry);
    }
    for (const key of ["hostToDevice", "deviceToHost", "onDevice", "betweenGpus"] as const) {
      const amount = counts[key];
      if (amount !== undefined && Number.isFinite(amount) && amount > 0) entry[key] += amount;
    }
  }

  /** A copy of the counters. */
  snapshot(): HostTransferSnapshot {
    const total = zero();
    const models: Record<string, HostTransferCounts> = {};
    for (const [name, counts] of this.#models) {
      models[name] = { ...counts };
      total.hostToDevice += counts.hostToDevice;
      total.deviceToHost += counts.deviceToHost;
      total.onDevice += counts.onDevice;
      total.betweenGpus += counts.betweenGpus;
    }
    return { total, models };
  }
}

/** The process's host↔device byte counters (see {@link HostTransfers}). */
export const hostTransfers: HostTransfers = new HostTransfers();
