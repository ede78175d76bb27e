import type { ModelConfig, ModelSequenceBatching_StrategyOldest } from "@galley/proto";
import type { Sequence } from "./sequence.js";
import type { BatchItem, BatchLayout, SequenceStrategy } from "./sequence-strategy.js";

/**
 * Triton's `oldest` strategy: an instance holds its share of `max_candidate_sequences`; the
 * sequences whose next request waited longest go first, and a batch may wait up to its delay to
 * fill unless it has a preferred size.
 */
export class OldestStrategy implements SequenceStrategy {
  readonly delayNs: bigint;
  readonly #config: ModelConfig;
  readonly #candidates: number;
  /** The batch sizes that are sent at once. */
  readonly #preferred: readonly number[];

  constructor(config: ModelConfig, oldest: ModelSequenceBatching_StrategyOldest) {
    this.#config = config;
    this.delayNs = oldest.maxQueueDelayMicroseconds * 1000n;
    this.#candidates = oldest.maxCandidateSequences;
    this.#preferred = oldest.preferredBatchSize;
  }

  slotsPerInstance(instances: number): number {
    if (this.#candidates > 0) return Math.max(1, Math.ceil(this.#candidates / Math.max(1, instances)));
    return Math.max(1, this.#config.maxBatchSize);
  }

  order(waiting: Sequence[]): void {
    waiting.sort((a, b) => ((a.queue[0]?.enqueuedNs ?? 0n) < (b.queue[0]?.enqueuedNs ?? 0n) ? -1 : 1));
  }

  short(size: number, max: number): boolean {
    return size < max && !this.#preferred.includes(size);
  }

  reason(size: number, max: number, short: boolean): string {
    if (this.delayNs === 0n) return "no delay";
    if (short) return "delay expired";
    return size === max ? "filled" : "preferred size reached";
  }

  batchSize(sequences: readonly Sequence[]): number {
    return sequences.length;
  }

  layout(items: readonly BatchItem[]): BatchLayout {
    return { requests: items.map((i) => i.request), at: items.map((_, i) => i) };
  }
}
