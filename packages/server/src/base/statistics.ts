import { LatencyHistogram } from "./latency-histogram.js";

/** A cumulative count and duration, as the statistics extension reports it. */
export interface Duration {
  count: number;
  ns: bigint;
}

const zero = (): Duration => ({ count: 0, ns: 0n });

const NS_PER_MS = 1_000_000n;

/** Statistics of one model version (PROTOCOL.md §8); metrics read the same numbers. */
export class ModelStatistics {
  /** Milliseconds since the epoch of the last inference; 0 before the first. */
  lastInference = 0;
  /** Batch elements inferred (cache hits excluded). */
  inferenceCount = 0;
  /** Model executions. */
  executionCount = 0;
  readonly success = zero();
  readonly fail = zero();
  readonly queue = zero();
  readonly computeInput = zero();
  readonly computeInfer = zero();
  readonly computeOutput = zero();
  readonly cacheHit = zero();
  readonly cacheMiss = zero();
  /** Failures by Triton's metric reason: REJECTED, CANCELED, BACKEND, OTHER. */
  readonly failures = { REJECTED: 0, CANCELED: 0, BACKEND: 0, OTHER: 0 };
  /** Requests waiting in the scheduler (the pending-request gauge). */
  pending = 0;
  /** Requests in the core's pipeline now, waiting or not (`pending` of them in the scheduler). */
  inflight = 0;
  /**
   * Per GPU (CUDA ordinal) the model's instances run on: executions, batch elements and compute
   * time there (`galley_gpu_*` metrics); empty for a model on the CPU or where the backend does not say.
   */
  readonly gpus = new Map<number, { executionCount: number; inferenceCount: number; computeInferNs: bigint }>();
  /** Per batch size: compute durations of executions with that many elements. */
  readonly batches = new Map<number, { computeInput: Duration; computeInfer: Duration; computeOutput: Duration }>();
  /** Seconds the load took. */
  loadSeconds = 0;
  /**
   * GPU-memory admission (`--gpu-memory-admission`), counted by the schedulers: batches that had to
   * wait for GPU memory (once per wait), batches sent smaller than gathered because the whole did
   * not fit, and batches whose requests got UNAVAILABLE after `--gpu-memory-wait-secs`
   * (`galley_model_memory_admission_batches_total`).
   */
  readonly memoryAdmission = { delayed: 0, reduced: 0, refused: 0 };
  /**
   * `nv_inference_first_response_histogram_ms` (`--metrics-config histogram_latencies=true`), over
   * the given bucket bounds; absent (and nothing observed) otherwise.
   */
  readonly firstResponse: LatencyHistogram | undefined;

  constructor(firstResponseBuckets?: readonly number[]) {
    this.firstResponse = firstResponseBuckets ? new LatencyHistogram(firstResponseBuckets) : undefined;
  }

  /**
   * A request's first response was sent `ns` after it started: observed in whole milliseconds
   * (truncated, as Triton's integer division does).
   */
  recordFirstResponse(ns: bigint): void {
    this.firstResponse?.observe(Number(ns / NS_PER_MS));
  }

  /** One request finished successfully after `totalNs`, of which `queueNs` waiting. */
  recordSuccess(totalNs: bigint, queueNs: bigint): void {
    add(this.success, totalNs);
    add(this.queue, queueNs);
    this.lastInference = Date.now();
  }

  /** A response-cache lookup that found the response, taking `ns`. */
  recordCacheHit(ns: bigint): void {
    add(this.cacheHit, ns);
  }

  /** A response-cache lookup that missed, plus the insertion of the computed response, taking `ns`. */
  recordCacheMiss(ns: bigint): void {
    add(this.cacheMiss, ns);
  }

  /** One request failed after `totalNs`. */
  recordFailure(totalNs: bigint, reason: keyof ModelStatistics["failures"]): void {
    add(this.fail, totalNs);
    this.failures[reason]++;
    this.lastInference = Date.now();
  }

  /**
   * One execution of `batchSize` elements serving `requests` requests: each request's compute
   * durations count once per request, as in Triton; the batch statistics once per execution.
   */
  recordExecution(
    batchSize: number,
    requests: number,
    inputNs: bigint,
    inferNs: bigint,
    outputNs: bigint,
    device?: number,
  ): void {
    this.executionCount++;
    this.inferenceCount += batchSize;
    if (device !== undefined) {
      const gpu = this.gpus.get(device) ?? { executionCount: 0, inferenceCount: 0, computeInferNs: 0n };
      gpu.executionCount++;
      gpu.inferenceCount += batchSize;
      gpu.computeInferNs += inferNs;
      this.gpus.set(device, gpu);
    }
    for (let i = 0; i < requests; i++) {
      add(this.computeInput, inputNs);
      add(this.computeInfer, inferNs);
      add(this.computeOutput, outputNs);
    }
    let batch = this.batches.get(batchSize);
    if (!batch) {
      batch = { computeInput: zero(), computeInfer: zero(), computeOutput: zero() };
      this.batches.set(batchSize, batch);
    }
    add(batch.computeInput, inputNs);
    add(batch.computeInfer, inferNs);
    add(batch.computeOutput, outputNs);
  }
}

function add(d: Duration, ns: bigint): void {
  d.count++;
  d.ns += ns;
}
