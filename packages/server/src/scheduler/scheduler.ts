import type { InferenceRequest } from "../core/inference-request.js";
import type { Tensor } from "../core/tensor.js";

/** What a scheduler hands back for one request. */
export interface ScheduledResult {
  outputs: Tensor[];
  /** Nanoseconds the request waited before its execution started. */
  queueNs: bigint;
}

/**
 * How a model's requests reach its instances. The default scheduler sends each request to a
 * free instance; the dynamic batcher, sequence batcher and ensemble scheduler implement the
 * same interface.
 */
export interface Scheduler {
  /** Run one validated request of `batchSize` elements. Rejects with an `InferenceError`. */
  enqueue(request: InferenceRequest, batchSize: number): Promise<ScheduledResult>;
  /** Take no more requests; resolves once every accepted request has finished. */
  drain(): Promise<void>;
}

/** Monotonic nanoseconds. */
export const now = (): bigint => process.hrtime.bigint();
