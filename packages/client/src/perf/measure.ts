// Measurement windows at one load level, perf_analyzer's way: windows of --measurement-interval ms
// until the last three agree within ±--stability-percentage in throughput and latency (or
// --max-trials windows have passed), then those three merged into the level's result.
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import type { LoadGenerator, RequestRecord } from "./load.js";
import { difference, mergeBreakdowns, type ServerBreakdown, type StatsSnapshot } from "./server-stats.js";

/** Client-side latency summary, in microseconds. */
export interface Latency {
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  average: number;
  /** The percentile asked for with --percentile, when it was. */
  chosen: number | undefined;
}

/** One measurement window (or several merged). */
export interface Measurement {
  /** Requests that answered inside the window(s). */
  requestCount: number;
  durationMs: number;
  /** Requests per second. */
  requestsPerSecond: number;
  /** Inferences (batch elements) per second: requests/s × batch size. */
  throughput: number;
  latency: Latency;
  server: ServerBreakdown;
  /** Every request's latency in µs, kept to merge windows exactly. */
  latenciesUs: Float64Array;
}

/** A load level's result. */
export interface LevelResult extends Measurement {
  /** The concurrency or request rate. */
  level: number;
  /** Windows measured at this level. */
  windows: number;
  /** The last three windows agreed within the stability percentage. */
  stable: boolean;
}

/** The p-th percentile (0–100) of sorted values, nearest rank as perf_analyzer computes it. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

/** Latencies summarised; `chosen` is the --percentile one. */
export function summarize(latenciesUs: Float64Array, chosenPercentile?: number): Latency {
  const sorted = Float64Array.from(latenciesUs).sort();
  const sum = sorted.reduce((n, v) => n + v, 0);
  return {
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    average: sorted.length > 0 ? sum / sorted.length : 0,
    chosen: chosenPercentile === undefined ? undefined : percentile(sorted, chosenPercentile),
  };
}

/** The latency perf_analyzer reports and checks: the chosen percentile, or the average. */
export function reportedLatency(latency: Latency): number {
  return latency.chosen ?? latency.average;
}

/** A window's measurement from its records and the server's statistics before and after. */
export function measurement(
  records: RequestRecord[],
  durationMs: number,
  batchSize: number,
  server: ServerBreakdown,
  chosenPercentile?: number,
): Measurement {
  const latenciesUs = Float64Array.from(records, (r) => (r.end - r.start) * 1000);
  const requestsPerSecond = durationMs > 0 ? (records.length * 1000) / durationMs : 0;
  return {
    requestCount: records.length,
    durationMs,
    requestsPerSecond,
    throughput: requestsPerSecond * batchSize,
    latency: summarize(latenciesUs, chosenPercentile),
    server,
    latenciesUs,
  };
}

/** Several windows as one: every latency pooled, throughput over the total time. */
export function merge(windows: Measurement[], batchSize: number, chosenPercentile?: number): Measurement {
  const latenciesUs = new Float64Array(windows.reduce((n, w) => n + w.latenciesUs.length, 0));
  let at = 0;
  for (const w of windows) {
    latenciesUs.set(w.latenciesUs, at);
    at += w.latenciesUs.length;
  }
  const requestCount = windows.reduce((n, w) => n + w.requestCount, 0);
  const durationMs = windows.reduce((n, w) => n + w.durationMs, 0);
  const requestsPerSecond = durationMs > 0 ? (requestCount * 1000) / durationMs : 0;
  return {
    requestCount,
    durationMs,
    requestsPerSecond,
    throughput: requestsPerSecond * batchSize,
    latency: summarize(latenciesUs, chosenPercentile),
    server: mergeBreakdowns(windows.map((w) => w.server)),
    latenciesUs,
  };
}

/**
 * perf_analyzer's stability rule: the last three windows' throughput and latency each lie within
 * ±`percentage`% of their own average, and every window saw at least one request.
 */
export function isStable(windows: Measurement[], percentage: number): boolean {
  if (windows.length < 3) return false;
  const last = windows.slice(-3);
  if (last.some((w) => w.requestCount === 0)) return false;
  const within = (values: number[]) => {
    const mean = values.reduce((n, v) => n + v, 0) / values.length;
    return values.every((v) => Math.abs(v - mean) <= (mean * percentage) / 100);
  };
  return within(last.map((w) => w.throughput)) && within(last.map((w) => reportedLatency(w.latency)));
}

/** How to measure one level. */
export interface MeasureOptions {
  level: number;
  batchSize: number;
  measurementIntervalMs: number;
  maxTrials: number;
  stabilityPercentage: number;
  percentile: number | undefined;
  /** Read the server's statistics for the model. */
  snapshot: () => Promise<StatsSnapshot>;
  /** Called after every window (the progress display). */
  onWindow?: (window: Measurement, trial: number) => void;
}

/** Measure a running load until it is stable or out of trials. */
export async function measureLevel(load: LoadGenerator, options: MeasureOptions): Promise<LevelResult> {
  const windows: Measurement[] = [];
  let before = await options.snapshot();
  let from = performance.now();
  for (let trial = 1; trial <= options.maxTrials; trial++) {
    // The window is the measurement itself: wall-clock time under load.
    await sleep(options.measurementIntervalMs);
    const to = performance.now();
    const after = await options.snapshot();
    if (load.error !== undefined) throw load.error;
    const window = measurement(
      load.take(from, to),
      to - from,
      options.batchSize,
      difference(before, after),
      options.percentile,
    );
    windows.push(window);
    options.onWindow?.(window, trial);
    if (isStable(windows, options.stabilityPercentage)) break;
    before = after;
    from = performance.now();
  }
  const stable = isStable(windows, options.stabilityPercentage);
  const merged = merge(windows.slice(-3), options.batchSize, options.percentile);
  return { ...merged, level: options.level, windows: windows.length, stable };
}
