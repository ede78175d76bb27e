import type { InferenceRequest } from "../../base/inference-request.js";
import type { Sequence } from "./sequence.js";

/** One sequence's next request, as the model receives it. */
export interface BatchItem {
  sequence: Sequence;
  request: InferenceRequest;
}

/** The requests an instance receives for a batch, and where each item's response is (`at[i]` for `items[i]`). */
export interface BatchLayout {
  requests: InferenceRequest[];
  at: number[];
}

/**
 * How the sequence batcher fills an instance's batches: `direct` (the default) or `oldest`, with
 * their `max_queue_delay_microseconds`.
 */
export interface SequenceStrategy {
  /** How long a batch short of what the strategy wants may wait to fill, in nanoseconds. */
  readonly delayNs: bigint;
  /** Sequences one instance holds at once. */
  slotsPerInstance(instances: number): number;
  /** Put an instance's waiting sequences in the order they join its batch (sorts in place). */
  order(waiting: Sequence[]): void;
  /** Whether a batch of `size` requests, of at most `max`, is short of what the strategy wants. */
  short(size: number, max: number): boolean;
  /** Why a batch of `size` is sent, as the verbose log line says. */
  reason(size: number, max: number, short: boolean): string;
  /** The requests sent for `items` (at least one). */
  layout(items: readonly BatchItem[]): BatchLayout;
  /** How many requests the model receives for a batch of these sequences' next requests (null requests included). */
  batchSize(sequences: readonly Sequence[]): number;
}
