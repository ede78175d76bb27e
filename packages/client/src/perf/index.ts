/**
 * `galley perf`: a load generator with Triton perf_analyzer's flags — concurrency sweeps or fixed
 * request rates over gRPC or HTTP, optionally through system shared memory; latency percentiles,
 * throughput and the server's own breakdown per level; a CSV report and an SVG chart.
 *
 * @packageDocumentation
 * @module @galley/client/perf
 */

export { renderChart } from "./chart.js";
export { chartFileName, type PerfIO, runPerf } from "./cli.js";
export {
  type InputSet,
  type InputSpec,
  type ModelShape,
  modelShape,
  type OutputSpec,
  PerfInputError,
} from "./inputs.js";
export { closedLoop, type LoadGenerator, openLoop, type RequestRecord, type Send } from "./load.js";
export {
  type Latency,
  type LevelResult,
  type Measurement,
  type MeasureOptions,
  measureLevel,
  percentile,
} from "./measure.js";
export {
  type InputDataSource,
  type LoadMode,
  PERF_USAGE,
  type PerfOptions,
  PerfUsageError,
  parsePerfOptions,
  parseRange,
} from "./options.js";
export { csvHeader, csvReport } from "./report.js";
export { type ServerBreakdown, type StatsSnapshot, takeSnapshot } from "./server-stats.js";
