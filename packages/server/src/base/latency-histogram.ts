/** Triton's per-model histogram of the time from a request to its first response. */
export const FIRST_RESPONSE_HISTOGRAM = "nv_inference_first_response_histogram_ms";

/** Its default bucket bounds in milliseconds (Triton's `MetricReporterConfig::histogram_options_`). */
export const FIRST_RESPONSE_BUCKETS: readonly number[] = [100, 500, 2000, 5000];

/**
 * Observations sorted into fixed buckets (`le` bounds, ascending), with their sum and count, as a
 * Prometheus histogram keeps them. `counts[i]` holds the observations in bucket `i` alone; the last
 * entry those above every bound (`+Inf`).
 */
export class LatencyHistogram {
  readonly bounds: readonly number[];
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(bounds: readonly number[]) {
    this.bounds = [...new Set(bounds)].sort((a, b) => a - b);
    this.counts = new Array<number>(this.bounds.length + 1).fill(0);
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > (this.bounds[i] as number)) i++;
    this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += value;
    this.count++;
  }
}
