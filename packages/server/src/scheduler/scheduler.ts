import type { InferenceRequest } from "../base/inference-request.js";
import type { Parameters, Tensor } from "../base/tensor.js";

/** What a scheduler hands back for one request. */
export interface ScheduledResult {
  outputs: Tensor[];
  /** Nanoseconds the request waited before its execution started. */
  queueNs: bigint;
  /** The response's parameters, where there are any: an ensemble's `sequence_*`, a backend's own (a Python model's `InferenceResponse(parameters=...)`). */
  parameters?: Parameters;
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
  /**
   * True while the scheduler keeps state that lives between requests (an open sequence): the
   * model is then not idle, and a memory budget does not evict it. False when absent.
   */
  holding?(): boolean;
}
