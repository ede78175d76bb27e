// What `galley perf` prints and writes: perf_analyzer's per-level blocks and summary on stdout, an
// aligned table of the sweep, a one-line progress report per window, and the CSV report.
import { type LevelResult, type Measurement, reportedLatency } from "./measure.js";
import type { LoadMode } from "./options.js";

const us = (n: number) => String(Math.round(n));
const rate = (n: number) => n.toFixed(2);

/** "Concurrency" or "Request Rate": the first CSV column and how a level is named. */
export function levelName(mode: LoadMode["kind"]): string {
  return mode === "concurrency" ? "Concurrency" : "Request Rate";
}

/**
 * perf_analyzer's latency-report columns. Blank where a client built on fetch and connect-node
 * cannot see the time apart: `Client Send` and `Client Recv` (request encoding and response
 * decoding are inside the measured latency, counted in `Network+Server Send/Recv`), and
 * `request/response`, `response wait` (perf_analyzer's HTTP-only split of the round trip). `Avg
 * Batch Size` is Galley's: the batches the server formed (inference_count / execution_count).
 */
export function csvHeader(mode: LoadMode["kind"]): string[] {
  return [
    levelName(mode),
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "Avg latency",
    "request/response",
    "response wait",
    "Avg Batch Size",
  ];
}

/** Client latency not spent in the server's queue or compute: network, transports, encoding. */
export function networkUs(result: Measurement): number {
  const s = result.server;
  return Math.max(0, result.latency.average - s.queueUs - s.computeInputUs - s.computeInferUs - s.computeOutputUs);
}

/** The CSV report: a header and one row per level, times in microseconds. */
export function csvReport(mode: LoadMode["kind"], results: LevelResult[]): string {
  const rows = results.map((r) => [
    String(r.level),
    rate(r.throughput),
    "",
    us(networkUs(r)),
    us(r.server.queueUs),
    us(r.server.computeInputUs),
    us(r.server.computeInferUs),
    us(r.server.computeOutputUs),
    "",
    us(r.latency.p50),
    us(r.latency.p90),
    us(r.latency.p95),
    us(r.latency.p99),
    us(r.latency.average),
    "",
    "",
    r.server.averageBatchSize.toFixed(2),
  ]);
  return `${[csvHeader(mode), ...rows].map((row) => row.join(",")).join("\n")}\n`;
}

/** One progress line (stderr) per window. */
export function progressLine(mode: LoadMode["kind"], level: number, trial: number, w: Measurement): string {
  return (
    `${levelName(mode)} ${level}, window ${trial}: ${rate(w.throughput)} infer/s, ` +
    `p50 ${us(w.latency.p50)} us, p99 ${us(w.latency.p99)} us, avg batch ${w.server.averageBatchSize.toFixed(2)}\n`
  );
}

/** The settings block perf_analyzer prints first. */
export function settingsBlock(settings: {
  batchSize: number;
  protocol: string;
  measurementIntervalMs: number;
  latencyThresholdMs: number;
  mode: LoadMode;
  percentile: number | undefined;
  sharedMemory: string;
}): string {
  const last = settings.mode.levels[settings.mode.levels.length - 1] ?? 0;
  return [
    "*** Measurement Settings ***",
    `  Batch size: ${settings.batchSize}`,
    `  Protocol: ${settings.protocol}${settings.sharedMemory === "system" ? ", system shared memory" : ""}`,
    `  Using "time_windows" mode for stabilization`,
    `  Measurement window: ${settings.measurementIntervalMs} msec`,
    `  Latency limit: ${settings.latencyThresholdMs} msec`,
    settings.mode.kind === "concurrency"
      ? `  Concurrency limit: ${last} concurrent requests`
      : `  Request Rate limit: ${last} requests per seconds`,
    `  Stabilizing using ${settings.percentile === undefined ? "average" : `p${settings.percentile}`} latency`,
    "",
  ].join("\n");
}

/** perf_analyzer's block for one level. */
export function levelBlock(mode: LoadMode["kind"], r: LevelResult): string {
  const s = r.server;
  const lines = [
    mode === "concurrency"
      ? `Request concurrency: ${r.level}`
      : `Request Rate: ${r.level} inference requests per seconds`,
    "  Client: ",
    `    Request count: ${r.requestCount}`,
    `    Throughput: ${rate(r.throughput)} infer/sec`,
    `    Avg latency: ${us(r.latency.average)} usec`,
    `    p50 latency: ${us(r.latency.p50)} usec`,
    `    p90 latency: ${us(r.latency.p90)} usec`,
    `    p95 latency: ${us(r.latency.p95)} usec`,
    `    p99 latency: ${us(r.latency.p99)} usec`,
    "  Server: ",
    `    Inference count: ${s.inferenceCount}`,
    `    Execution count: ${s.executionCount}`,
    `    Successful request count: ${s.requestCount}`,
    `    Avg request latency: ${us(s.requestUs)} usec (overhead ${us(s.overheadUs)} usec + queue ${us(s.queueUs)} usec + ` +
      `compute input ${us(s.computeInputUs)} usec + compute infer ${us(s.computeInferUs)} usec + ` +
      `compute output ${us(s.computeOutputUs)} usec)`,
    `    Avg batch size: ${s.averageBatchSize.toFixed(2)}`,
  ];
  if (!r.stable) {
    lines.push(`  Warning: not stable within ${r.windows} windows; reporting the last ${Math.min(3, r.windows)}`);
  }
  return `${lines.join("\n")}\n\n`;
}

function aligned(rows: string[][]): string {
  const widths = (rows[0] ?? []).map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows
    .map((row) =>
      row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join("  "),
    )
    .join("\n");
}

/** perf_analyzer's closing lines, then the sweep as one table (times in µs). */
export function summary(mode: LoadMode["kind"], results: LevelResult[], chosenPercentile: number | undefined): string {
  const which = chosenPercentile === undefined ? "Average" : `p${chosenPercentile}`;
  const lines = [`Inferences/Second vs. Client ${which} Batch Latency`];
  for (const r of results) {
    lines.push(
      `${levelName(mode)}: ${r.level}, throughput: ${rate(r.throughput)} infer/sec, latency ${us(reportedLatency(r.latency))} usec`,
    );
  }
  const table = [
    [
      mode === "concurrency" ? "concurrency" : "rate",
      "infer/s",
      "p50",
      "p90",
      "p95",
      "p99",
      "avg",
      "queue",
      "c.input",
      "c.infer",
      "c.output",
      "network",
      "batch",
      "stable",
    ],
    ...results.map((r) => [
      String(r.level),
      rate(r.throughput),
      us(r.latency.p50),
      us(r.latency.p90),
      us(r.latency.p95),
      us(r.latency.p99),
      us(r.latency.average),
      us(r.server.queueUs),
      us(r.server.computeInputUs),
      us(r.server.computeInferUs),
      us(r.server.computeOutputUs),
      us(networkUs(r)),
      r.server.averageBatchSize.toFixed(2),
      r.stable ? "yes" : "no",
    ]),
  ];
  return `${lines.join("\n")}\n\n${aligned(table)}\n`;
}
