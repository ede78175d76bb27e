/**
 * A model version's GPU working memory per batch size: the most its executions took (the PyTorch
 * allocator's peak during the batch less what was held before it), from warmup and from every batch
 * since. What a batch of a size never seen takes is estimated from the largest bytes per sample
 * seen at any size (working memory grows about linearly with the batch).
 */
export class BatchMemory {
  readonly #peaks = new Map<number, number>();

  /** One execution of `size` took `bytes` at its peak. */
  record(size: number, bytes: number): void {
    if (!(size > 0) || !(bytes >= 0)) return;
    if (bytes > (this.#peaks.get(size) ?? -1)) this.#peaks.set(size, bytes);
  }

  /** The bytes a batch of `size` is expected to take; undefined before any execution was measured. */
  estimate(size: number): number | undefined {
    const seen = this.#peaks.get(size);
    if (seen !== undefined) return seen;
    let perSample: number | undefined;
    for (const [n, bytes] of this.#peaks) perSample = Math.max(perSample ?? 0, bytes / n);
    return perSample === undefined ? undefined : Math.ceil(perSample * size);
  }

  /** The peaks measured so far, by batch size (for statistics and logs). */
  get peaks(): ReadonlyMap<number, number> {
    return this.#peaks;
  }
}
