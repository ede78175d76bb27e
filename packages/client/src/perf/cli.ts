// `galley perf`: perf_analyzer's job with perf_analyzer's flags. Reads the model's metadata and
// config, builds its inputs, then for each load level runs the load, measures windows until stable,
// and prints perf_analyzer's report; `-f` also writes the CSV and an SVG chart.
import { readFile, writeFile } from "node:fs/promises";
import type { InferenceClient } from "../client-types.js";
import { createGrpcClient } from "../grpc-client.js";
import { createRestClient } from "../rest-client.js";
import { renderChart } from "./chart.js";
import { loadInputs, modelShape, PerfInputError } from "./inputs.js";
import { closedLoop, type LoadGenerator, openLoop } from "./load.js";
import { type LevelResult, measureLevel, reportedLatency } from "./measure.js";
import { PERF_USAGE, type PerfOptions, PerfUsageError, parsePerfOptions } from "./options.js";
import { csvReport, levelBlock, progressLine, settingsBlock, summary } from "./report.js";
import { bodyRequests, type RequestSource, sharedMemoryRequests } from "./requests.js";
import { takeSnapshot } from "./server-stats.js";

/** Where `galley perf` writes: stdout gets the report, stderr the progress and errors. */
export interface PerfIO {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

/** The chart's file name for a CSV report's: `FILE.csv` → `FILE.svg`. */
export function chartFileName(reportFile: string): string {
  return /\.csv$/i.test(reportFile) ? reportFile.replace(/\.csv$/i, ".svg") : `${reportFile}.svg`;
}

/** An error's message, with its cause's (fetch says only "fetch failed"; the cause says why). */
function message(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? error.cause : undefined;
  const code = (cause as { code?: string } | undefined)?.code;
  return cause
    ? `${error.message}: ${cause.message}${code && !cause.message.includes(code) ? ` (${code})` : ""}`
    : error.message;
}

/** A failure worth one line on stderr and exit code 1. */
class PerfError extends Error {}

function connect(options: PerfOptions): InferenceClient {
  return options.protocol === "grpc"
    ? createGrpcClient({ baseUrl: options.url, retry: false })
    : createRestClient({ baseUrl: options.url });
}

async function prepare(client: InferenceClient, options: PerfOptions): Promise<RequestSource> {
  let metadata: Awaited<ReturnType<InferenceClient["modelMetadata"]>>;
  let config: Awaited<ReturnType<InferenceClient["modelConfig"]>>;
  try {
    [metadata, config] = await Promise.all([
      client.modelMetadata(options.model, options.version),
      client.modelConfig(options.model, options.version),
    ]);
  } catch (error) {
    throw new PerfError(
      `cannot get the metadata of model '${options.model}' from ${options.protocol} ${options.url}: ${message(error)}`,
    );
  }
  if (config.schedulingChoice.case === "sequenceBatching") {
    throw new PerfError(`'${options.model}' is a sequence model: galley perf does not drive sequences yet`);
  }
  if (config.modelTransactionPolicy?.decoupled) {
    throw new PerfError(`'${options.model}' is decoupled: galley perf does not stream yet`);
  }
  const shape = modelShape(metadata, config, options.batchSize, options.shapes);
  const sets = await loadInputs(shape, options.batchSize, options.inputData, options.stringLength, (path) =>
    readFile(path, "utf8"),
  );
  if (options.sharedMemory === "none") return bodyRequests(sets, options.version);
  try {
    return await sharedMemoryRequests(client, sets, shape.outputs, options.outputSharedMemorySize, options.version);
  } catch (error) {
    throw new PerfError(
      `cannot use system shared memory: ${message(error)} (the server must run with --allow-client-shm=true ` +
        "and share /dev/shm with this machine)",
    );
  }
}

function startLoad(options: PerfOptions, level: number, send: () => Promise<unknown>): LoadGenerator {
  return options.load.kind === "concurrency"
    ? closedLoop(level, send)
    : openLoop(level, send, options.requestDistribution, options.maxInFlight);
}

async function sweep(client: InferenceClient, requests: RequestSource, options: PerfOptions, io: PerfIO) {
  const mode = options.load.kind;
  const send = () => client.infer(options.model, requests.next());
  try {
    await send();
  } catch (error) {
    throw new PerfError(`the first request to '${options.model}' failed: ${message(error)}`);
  }
  const results: LevelResult[] = [];
  for (const level of options.load.levels) {
    const load = startLoad(options, level, send);
    let result: LevelResult;
    try {
      result = await measureLevel(load, {
        level,
        batchSize: options.batchSize,
        measurementIntervalMs: options.measurementIntervalMs,
        maxTrials: options.maxTrials,
        stabilityPercentage: options.stabilityPercentage,
        percentile: options.percentile,
        snapshot: () => takeSnapshot(client, options.model, options.version),
        onWindow: (window, trial) => {
          if (!options.quiet) io.stderr.write(progressLine(mode, level, trial, window));
        },
      });
    } catch (error) {
      throw new PerfError(`at ${mode} ${level}: ${message(error)}`);
    } finally {
      await load.stop();
    }
    results.push(result);
    io.stdout.write(levelBlock(mode, result));
    if (mode === "request-rate" && result.requestsPerSecond < level * 0.9) {
      // perf_analyzer's warning: the server (or this client) did not keep up with the schedule.
      io.stderr.write(
        `warning: asked for ${level} requests/s, ${result.requestsPerSecond.toFixed(1)} answered per second\n`,
      );
    }
    if (options.latencyThresholdMs > 0 && reportedLatency(result.latency) > options.latencyThresholdMs * 1000) {
      io.stderr.write(`latency exceeded the ${options.latencyThresholdMs} ms limit: stopping the sweep\n`);
      break;
    }
  }
  return results;
}

/**
 * Run `galley perf` with command-line arguments (without `galley perf` itself); resolves to the
 * process exit code. The report goes to `io.stdout`, progress and errors to `io.stderr`.
 *
 * @example
 * process.exitCode = await runPerf(["-m", "simple", "--concurrency-range", "1:8:1", "-f", "simple.csv"]);
 */
export async function runPerf(argv: string[], io: PerfIO = process): Promise<number> {
  let options: PerfOptions;
  try {
    const parsed = parsePerfOptions(argv);
    if (parsed === "help") {
      io.stdout.write(PERF_USAGE);
      return 0;
    }
    options = parsed;
  } catch (error) {
    if (!(error instanceof PerfUsageError)) throw error;
    io.stderr.write(`error: ${error.message}\n\n${PERF_USAGE}`);
    return 1;
  }
  const client = connect(options);
  let requests: RequestSource | undefined;
  try {
    requests = await prepare(client, options);
    io.stdout.write(`${settingsBlock({ ...options, mode: options.load })}\n`);
    const results = await sweep(client, requests, options, io);
    io.stdout.write(summary(options.load.kind, results, options.percentile));
    if (options.reportFile) {
      const chart = chartFileName(options.reportFile);
      await writeFile(options.reportFile, csvReport(options.load.kind, results));
      await writeFile(chart, renderChart(options.model, options.load.kind, results));
      io.stderr.write(`wrote ${options.reportFile} and ${chart}\n`);
    }
    return 0;
  } catch (error) {
    // Ours (PerfError, PerfInputError) carry the whole story; anything else gets its name too.
    const known = error instanceof PerfError || error instanceof PerfInputError;
    io.stderr.write(`error: ${known ? message(error) : String(error)}\n`);
    return 1;
  } finally {
    await requests?.dispose();
    client.close();
  }
}
