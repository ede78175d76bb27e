import { parseArgs } from "node:util";
import type { ControlMode } from "../repository/model-manager.js";
import type { ServerOptions } from "../server.js";
import { parseBackendConfig } from "./backend-config.js";
import { bareLoadOnDemand, MEMORY_OPTIONS, readMemoryFlags } from "./memory-options.js";
import { parseTraceConfig } from "./trace-options.js";
import { readTritonOnlyFlags, TRITON_ONLY_OPTIONS, type TritonOnlyFlags } from "./triton-only-flags.js";
import { tritonIntBool } from "./triton-values.js";
import { readVideosFlags, VIDEOS_OPTIONS, VIDEOS_USAGE } from "./videos-options.js";

/** `galley serve` options, named and defaulted as tritonserver's flags (PROTOCOL.md §6). */
export interface ServeOptions {
  server: ServerOptions;
  /** `--exit-on-error` (default true): exit when a model fails to load at startup. */
  exitOnError: boolean;
  logVerbose: number;
  logFormat: "default" | "ISO8601";
  logInfo: boolean;
  logWarning: boolean;
  logError: boolean;
  /** `--log-file`: the log goes to this file (appended) instead of stderr. */
  logFile?: string;
  /** Warnings to log at startup (deprecated flags, flags accepted and not used). */
  warnings: string[];
}

/** A command-line mistake: printed with the usage text, exit code 1. */
export class UsageError extends Error {
  override name = "UsageError";
}

export const SERVE_USAGE = `Usage: galley serve --model-repository <path> [options]

Options are named and defaulted as tritonserver's; booleans take true/on/1 or false/off/0.

Models
  --model-repository, --model-store <path>  model repository; repeatable (required): a folder,
                                 or s3://bucket/path, s3://[http://|https://]host:port/bucket/path
                                 (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
                                 AWS_DEFAULT_REGION, AWS_PROFILE; models download to
                                 TRITON_AWS_MOUNT_DIRECTORY or the temp folder; limits:
                                 GALLEY_S3_MAX_FILES, GALLEY_S3_MAX_MODEL_BYTES)
  --model-control-mode <none|poll|explicit>  (default: none)
  --load-model <name>            load at startup in explicit mode; repeatable; '*' loads all
  --repository-poll-secs <n>     rescan interval in poll mode (default: 15)
  --strict-readiness <bool>      ready only when every model loaded (default: true)
  --exit-on-error <bool>         exit if a model fails to load at startup (default: true)
  --disable-auto-complete-config do not complete configs from model files
  --strict-model-config <bool>   deprecated: true is --disable-auto-complete-config
  --model-config-name <name>     use <model>/configs/<name>.pbtxt where present
  --model-load-thread-count <n>  versions loaded at once (default: 4)
  --model-load-retry-count <n>   times a version that failed to load is loaded again at once (default: 0)
  --load-on-demand[=<bool>]      explicit mode: an inference request for a repository model that is not
                                 loaded loads it and waits (default: false)
  --load-on-demand-wait-secs <n> the longest a request waits for that load (default: 120)
  --model-memory-budget host:<size>[,gpu<N>:<size>]   with --load-on-demand: idle models are evicted,
                                 least recently used first, to keep the loaded models within <size>
                                 (bytes, or KiB/MiB/GiB/TiB, KB/MB/GB/TB); host memory and each GPU's
  --model-min-residency <secs>   a model is not evicted within this time of its load (default: 30)
  --gpu-memory-admission[=<bool>]  a dynamic batch for a GPU instance starts only when its working memory
                                 (measured per batch size) fits the GPU's free memory (default: false)
  --gpu-memory-reserve <size>    with it: free memory left on each GPU (default: 512MiB)
  --gpu-memory-wait-secs <n>     with it: the longest a batch waits for room; then UNAVAILABLE (default: 10)
  --model-namespacing <bool>     false only (the default): a model name is unique across repositories
  --backend-config onnxruntime,default-max-batch-size=<n>   (default: 4)
  --backend-config python,python-executable=<path>         (default: python3 on PATH)
  --backend-config js,default-isolation=<thread|shared>    (default: thread)
  --backend-config <backend>,<setting>=<value>   others (Triton's Python backend's shm-default-byte-size,
                                 stub-timeout-seconds, ...): accepted, checked as Triton does, logged as unused
  --backend-directory <path>     where Triton's Python-based backends are: a model whose backend is none
                                 of Galley's runs <path>/<backend>/model.py with the Python backend
  --cache-config local,size=<bytes>   response cache for models with response_cache { enable: true }
  --response-cache-byte-size <bytes>  deprecated form of --cache-config local,size=<bytes>
  --rate-limit <off|execution_count>  (default: off)
  --rate-limit-resource <name>:<count>[:<device>]   repeatable
Server
  --id <name>                    server name in metadata (default: triton)
  --exit-timeout-secs <n>        seconds to drain in-flight requests at exit (default: 30); an
                                 unload waits as long for a Python or JS model's requests
  --allow-client-shm <bool>      let clients register system shared memory (default: false)
HTTP
  --allow-http <bool>            (default: true)
  --http-address <host>          (default: 0.0.0.0)
  --http-port <port>             (default: 8000; 0 picks a free port)
  --http-max-input-size <bytes>  largest JSON document, JSON or raw input, decompressed body, as
                                 Triton (not binary tensor data) (default: 67108864)
  --http-max-body-size <bytes>   largest inference request body as received, binary data included
                                 (Galley's own bound; default: 4294967296)
  --http-restricted-api <apis>:<key>=<value>   repeatable
  --http-header-timeout-secs <n>     request line and headers must arrive within n s (default: 60; 0: no limit)
  --http-idle-timeout-secs <n>       close a connection that sends nothing for n s while a request
                                     is due or its body is arriving (default: 60; 0: no limit)
  --http-keepalive-timeout-secs <n>  close idle keep-alive connections after n s (default: 5; 0: never)
  --http-max-connections <n>     open connections past n are answered 503 and closed (default: half
                                 the descriptor limit less 256; 0: no limit)
gRPC
  --allow-grpc <bool>            (default: true)
  --grpc-address <host>          (default: 0.0.0.0)
  --grpc-port <port>             (default: 8001; 0 picks a free port)
  --grpc-keepalive-time <ms>     ping interval (default: 7200000)
  --grpc-keepalive-timeout <ms>  ping answer deadline (default: 20000)
  --grpc-idle-timeout-secs <n>   close a connection with no open call for n s (default: 300; 0: never);
                                 one that opens no call is closed 10 s after connecting
  --grpc-max-connections <n>     calls on connections past n are answered UNAVAILABLE and the
                                 connection closed (default: as --http-max-connections; 0: no limit)
  --grpc-restricted-protocol <protocols>:<key>=<value>   repeatable
  --grpc-use-ssl, --grpc-use-ssl-mutual <bool>   false only: Galley's gRPC endpoint has no TLS
Metrics
  --allow-metrics <bool>         (default: true)
  --metrics-address <host>       (default: the HTTP address)
  --metrics-port <port>          (default: 8002)
  --allow-gpu-metrics <bool>     per-GPU nv_gpu_* metrics through NVML where there is one (default: true)
  --metrics-interval-ms <ms>     how often GPU metrics are sampled (default: 2000)
  --allow-cpu-metrics <bool>     nv_cpu_utilization and nv_cpu_memory_*_bytes (default: true)
  --metrics-config counter_latencies=<bool>   repeatable; also histogram_latencies=true
                                 (nv_inference_first_response_histogram_ms, off by default),
                                 batch_size_histogram=<bool> (Galley's, off); Triton's other settings
                                 (summary_latencies, summary_quantiles, ...) are accepted and not used
Tracing (Triton's trace extension; the trace-setting API changes all but the file)
  --trace-config triton,file=<path>           where traces are written (none: tracing stays off)
  --trace-config level=<OFF|TIMESTAMPS|TENSORS>   repeatable; levels combine (default: OFF)
  --trace-config rate=<n>                     trace every n-th request (default: 1000)
  --trace-config count=<n>                    stop after n traces; -1: no limit (default: -1)
  --trace-config triton,log-frequency=<n>     write <path>.<i> every n traces; 0: all to <path> (default: 0)
  --trace-config mode=<triton|opentelemetry>  triton: JSON trace file; opentelemetry: OTLP/HTTP spans,
                                 with W3C traceparent/tracestate read from requests (a request that
                                 carries one is traced whatever the rate; rate=0 traces only those)
  --trace-config opentelemetry,url=<url>      OTLP/HTTP receiver (default: http://localhost:4318/v1/traces)
  --trace-config opentelemetry,resource=<key>=<value>   repeatable (default: service.name=triton-inference-server)
  --trace-config opentelemetry,bsp_max_queue_size=<n>   spans waiting for export; more are dropped (default: 2048)
  --trace-config opentelemetry,bsp_schedule_delay=<ms>  time between exports (default: 5000)
  --trace-config opentelemetry,bsp_max_export_batch_size=<n>   spans per export (default: 512);
                                 the three bsp_* default to OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_SCHEDULE_DELAY,
                                 OTEL_BSP_MAX_EXPORT_BATCH_SIZE when set
  --trace-file, --trace-level, --trace-rate, --trace-count, --trace-log-frequency   deprecated forms
${VIDEOS_USAGE}Logging
  --log-file <path>              append the log to this file instead of stderr
  --log-verbose <level>          an integer, or true (1) / false (0) (default: 0)
  --log-info, --log-warning, --log-error <bool>   (default: true)
  --log-format <default|ISO8601> (default: default)
  --help                         print this text
Accepted from tritonserver command lines and not used (a warning at startup names each one given);
values are checked as tritonserver checks them
  --pinned-memory-pool-byte-size <integer>
  --cuda-memory-pool-byte-size <integer>:<integer>        repeatable
  --cuda-virtual-address-size <integer>:<integer>         repeatable
  --min-supported-compute-capability <float>
  --buffer-manager-thread-count <integer>
  --host-policy <string>,<string>=<string>                repeatable; numa-node or cpu-cores
  --model-load-gpu-limit <device_id>:<fraction>           repeatable
  --enable-peer-access <bool>
  --repoagent-directory <path>, --cache-directory <path>
  --reuse-http-port <bool>, --reuse-grpc-port <bool>
  --http-thread-count <integer>, --http-header-forward-pattern <regex>, --grpc-header-forward-pattern <regex>
  --grpc-infer-thread-count <integer>, --grpc-infer-allocation-pool-size <integer>,
  --grpc-max-response-pool-size <integer>, --grpc-infer-response-compression-level <none|low|medium|high>
  --grpc-server-cert <path>, --grpc-server-key <path>, --grpc-root-cert <path>
  --grpc-keepalive-permit-without-calls <bool>, --grpc-http2-max-pings-without-data <integer>,
  --grpc-http2-min-recv-ping-interval-without-data <integer>, --grpc-http2-max-ping-strikes <integer>,
  --grpc-max-connection-age <integer>, --grpc-max-connection-age-grace <integer>
  --allow-sagemaker <bool>, --allow-vertex-ai <bool>      false only: Galley has neither endpoint
  --sagemaker-port, --sagemaker-safe-port-range <integer>-<integer>, --sagemaker-thread-count,
  --vertex-ai-port, --vertex-ai-thread-count, --vertex-ai-default-model
`;

/** The longest time limit a timer can hold (2^31 - 1 ms), in whole seconds. */
const MAX_TIMEOUT_SECS = 2_147_483;

const RESTRICTED_APIS = new Set([
  "health",
  "metadata",
  "inference",
  "shared-memory",
  "model-config",
  "model-repository",
  "statistics",
  "trace",
  "logging",
]);

/** Parse `galley serve` arguments; throws {@link UsageError} on any mistake. */
export function parseServeArgs(args: string[]): ServeOptions | "help" {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(bareLoadOnDemand(args));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const v = parsed.values;
  if (v.help) return "help";
  let tritonOnly: TritonOnlyFlags;
  try {
    tritonOnly = readTritonOnlyFlags(v);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const modelRepositories = [...(v["model-repository"] ?? []), ...(v["model-store"] ?? [])];
  if (modelRepositories.length === 0) throw new UsageError("--model-repository must be specified");
  const logFormat = v["log-format"] ?? "default";
  if (logFormat !== "default" && logFormat !== "ISO8601") {
    throw new UsageError(`invalid value for --log-format: '${logFormat}' (expected default or ISO8601)`);
  }
  const controlMode = (v["model-control-mode"] ?? "none") as ControlMode;
  if (!["none", "poll", "explicit"].includes(controlMode)) {
    throw new UsageError(`invalid value for --model-control-mode: '${controlMode}' (expected none, poll or explicit)`);
  }
  const loadModels = v["load-model"] ?? [];
  if (loadModels.length > 0 && controlMode !== "explicit") {
    throw new UsageError("--load-model can only be used with --model-control-mode=explicit");
  }
  let memory: ReturnType<typeof readMemoryFlags>;
  try {
    memory = readMemoryFlags(v, controlMode);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const httpHost = v["http-address"] ?? "0.0.0.0";
  const http = bool("--allow-http", v["allow-http"], true) && {
    host: httpHost,
    port: port("--http-port", v["http-port"], 8000),
    maxInputSize: int("--http-max-input-size", v["http-max-input-size"], 64 * 1024 * 1024, 1),
    maxBodySize: int("--http-max-body-size", v["http-max-body-size"], 2 ** 32, 1),
    restricted: (v["http-restricted-api"] ?? []).map((spec) => {
      const rule = restriction("--http-restricted-api", spec);
      return { apis: rule.names, key: rule.key, value: rule.value };
    }),
    headerTimeoutMs: int("--http-header-timeout-secs", v["http-header-timeout-secs"], 60, 0, MAX_TIMEOUT_SECS) * 1000,
    idleTimeoutMs: int("--http-idle-timeout-secs", v["http-idle-timeout-secs"], 60, 0, MAX_TIMEOUT_SECS) * 1000,
    keepAliveTimeoutMs:
      int("--http-keepalive-timeout-secs", v["http-keepalive-timeout-secs"], 5, 0, MAX_TIMEOUT_SECS) * 1000,
    ...(v["http-max-connections"] !== undefined
      ? { maxConnections: int("--http-max-connections", v["http-max-connections"], 0, 0) }
      : {}),
  };
  const grpc = bool("--allow-grpc", v["allow-grpc"], true) && {
    host: v["grpc-address"] ?? "0.0.0.0",
    port: port("--grpc-port", v["grpc-port"], 8001),
    keepaliveTimeMs: int("--grpc-keepalive-time", v["grpc-keepalive-time"], 7_200_000, 1),
    keepaliveTimeoutMs: int("--grpc-keepalive-timeout", v["grpc-keepalive-timeout"], 20_000, 1),
    idleTimeoutMs: int("--grpc-idle-timeout-secs", v["grpc-idle-timeout-secs"], 300, 0, MAX_TIMEOUT_SECS) * 1000,
    ...(v["grpc-max-connections"] !== undefined
      ? { maxConnections: int("--grpc-max-connections", v["grpc-max-connections"], 0, 0) }
      : {}),
    restricted: (v["grpc-restricted-protocol"] ?? []).map((spec) => {
      const rule = restriction("--grpc-restricted-protocol", spec);
      return { protocols: rule.names, key: rule.key, value: rule.value };
    }),
  };
  let counterLatencies = true;
  let batchSizeHistogram = false;
  let histogramLatencies = false;
  const unusedMetricsConfig: string[] = [];
  for (const setting of v["metrics-config"] ?? []) {
    // tritonserver's ParseMetricsConfigOption: <setting>=<value>, no group name, neither part empty.
    const at = setting.indexOf("=");
    const key = at < 0 ? "" : setting.slice(0, at);
    const value = at < 0 ? "" : setting.slice(at + 1);
    if (key === "" || value === "" || key.includes(",")) {
      throw new UsageError(
        `Bad option: "--metrics-config".\n--metrics-config option format is <setting>=<value>. Got ${setting}`,
      );
    }
    if (key === "counter_latencies") counterLatencies = bool("--metrics-config counter_latencies", value, true);
    else if (key === "batch_size_histogram")
      batchSizeHistogram = bool("--metrics-config batch_size_histogram", value, false);
    // Triton's core turns the histograms on for exactly "true"; any other value leaves them off.
    else if (key === "histogram_latencies") histogramLatencies = value === "true";
    else unusedMetricsConfig.push(setting);
  }
  const metrics = bool("--allow-metrics", v["allow-metrics"], true) && {
    host: v["metrics-address"] ?? httpHost,
    port: port("--metrics-port", v["metrics-port"], 8002),
    counterLatencies,
    batchSizeHistogram,
    histogramLatencies,
    allowGpuMetrics: bool("--allow-gpu-metrics", v["allow-gpu-metrics"], true),
    intervalMs: int("--metrics-interval-ms", v["metrics-interval-ms"], 2000, 1, MAX_TIMEOUT_SECS * 1000),
    ...(tritonOnly.allowCpuMetrics !== undefined ? { allowCpuMetrics: tritonOnly.allowCpuMetrics } : {}),
  };
  let backendConfig: ReturnType<typeof parseBackendConfig>;
  try {
    backendConfig = parseBackendConfig(v["backend-config"] ?? [], { backendDirectory: v["backend-directory"] });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { onnxDefaultMaxBatchSize, pythonExecutable, jsDefaultIsolation } = backendConfig;
  let responseCacheBytes: number | undefined;
  if (v["response-cache-byte-size"] !== undefined) {
    responseCacheBytes = int("--response-cache-byte-size", v["response-cache-byte-size"], 0, 0);
  }
  for (const setting of v["cache-config"] ?? []) {
    const match = /^local,size=(\d+)$/.exec(setting);
    if (!match) throw new UsageError(`unsupported --cache-config '${setting}' (supported: local,size=<bytes>)`);
    responseCacheBytes = Number(match[1]);
  }
  const rateLimit = v["rate-limit"] ?? "off";
  if (rateLimit !== "off" && rateLimit !== "execution_count") {
    throw new UsageError(`invalid value for --rate-limit: '${rateLimit}' (expected off or execution_count)`);
  }
  const rateLimitResources = (v["rate-limit-resource"] ?? []).map((spec) => {
    const match = /^([^:]+):(\d+)(?::(\d+))?$/.exec(spec);
    if (!match)
      throw new UsageError(`invalid value for --rate-limit-resource: '${spec}' (expected <name>:<count>[:<device>])`);
    return {
      name: match[1] ?? "",
      count: Number(match[2]),
      ...(match[3] !== undefined ? { device: Number(match[3]) } : {}),
    };
  });
  let trace: ReturnType<typeof parseTraceConfig>;
  try {
    trace = parseTraceConfig(v["trace-config"] ?? [], {
      file: v["trace-file"],
      level: v["trace-level"],
      rate: v["trace-rate"],
      count: v["trace-count"],
      logFrequency: v["trace-log-frequency"],
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const autoComplete =
    !v["disable-auto-complete-config"] && !bool("--strict-model-config", v["strict-model-config"], false);
  let jobs: ReturnType<typeof readVideosFlags>;
  try {
    jobs = readVideosFlags(v, { bool, int }, http !== false);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const server: ServerOptions = {
    ...(jobs ? { jobs } : {}),
    modelRepositories,
    id: v.id ?? "triton",
    http,
    grpc,
    metrics,
    controlMode,
    loadModels,
    ...memory,
    pollSecs: int("--repository-poll-secs", v["repository-poll-secs"], 15, 1),
    strictReadiness: bool("--strict-readiness", v["strict-readiness"], true),
    autoComplete,
    modelLoadThreads: int("--model-load-thread-count", v["model-load-thread-count"], 4, 1),
    ...(tritonOnly.modelLoadRetries ? { modelLoadRetries: tritonOnly.modelLoadRetries } : {}),
    exitTimeoutSecs: int("--exit-timeout-secs", v["exit-timeout-secs"], 30, 0),
    allowClientShm: bool("--allow-client-shm", v["allow-client-shm"], false),
    ...(onnxDefaultMaxBatchSize !== undefined ? { onnxDefaultMaxBatchSize } : {}),
    ...(pythonExecutable ? { pythonExecutable } : {}),
    ...(v["backend-directory"] ? { backendDirectory: v["backend-directory"] } : {}),
    ...(jsDefaultIsolation ? { jsDefaultIsolation } : {}),
    ...(responseCacheBytes ? { responseCacheBytes } : {}),
    rateLimit,
    rateLimitResources,
    ...(v["model-config-name"] ? { modelConfigName: v["model-config-name"] } : {}),
    trace: trace.config,
  };
  return {
    server,
    exitOnError: bool("--exit-on-error", v["exit-on-error"], true),
    logVerbose: logVerbose(v["log-verbose"]),
    logFormat,
    logInfo: bool("--log-info", v["log-info"], true),
    logWarning: bool("--log-warning", v["log-warning"], true),
    logError: bool("--log-error", v["log-error"], true),
    ...(tritonOnly.logFile ? { logFile: tritonOnly.logFile } : {}),
    warnings: [
      ...trace.warnings,
      ...backendConfig.warnings,
      ...(unusedMetricsConfig.length > 0
        ? [
            `${unusedMetricsConfig.map((m) => `--metrics-config=${m}`).join(" ")}: accepted, not used by Galley ` +
              "(it exports latency counters and the first-response histogram, no summaries)",
          ]
        : []),
      ...tritonOnly.unused,
    ],
  };
}

function parse(args: string[]) {
  const text = { type: "string" } as const;
  const many = { type: "string", multiple: true } as const;
  return parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: {
      "model-repository": many,
      "model-store": many,
      "model-control-mode": text,
      "load-model": many,
      "repository-poll-secs": text,
      "strict-readiness": text,
      "exit-on-error": text,
      "disable-auto-complete-config": { type: "boolean" },
      "strict-model-config": text,
      "model-config-name": text,
      "model-load-thread-count": text,
      "backend-config": many,
      "backend-directory": text,
      "cache-config": many,
      "rate-limit": text,
      "rate-limit-resource": many,
      "response-cache-byte-size": text,
      id: text,
      "exit-timeout-secs": text,
      "allow-client-shm": text,
      "allow-http": text,
      "http-address": text,
      "http-port": text,
      "http-max-input-size": text,
      "http-max-body-size": text,
      "http-restricted-api": many,
      "http-header-timeout-secs": text,
      "http-idle-timeout-secs": text,
      "http-max-connections": text,
      "http-keepalive-timeout-secs": text,
      "allow-grpc": text,
      "grpc-address": text,
      "grpc-port": text,
      "grpc-keepalive-time": text,
      "grpc-keepalive-timeout": text,
      "grpc-idle-timeout-secs": text,
      "grpc-max-connections": text,
      "grpc-restricted-protocol": many,
      "allow-metrics": text,
      "metrics-address": text,
      "metrics-port": text,
      "metrics-config": many,
      "allow-gpu-metrics": text,
      "metrics-interval-ms": text,
      "trace-config": many,
      "trace-file": text,
      "trace-level": many,
      "trace-rate": text,
      "trace-count": text,
      "trace-log-frequency": text,
      "log-verbose": text,
      "log-info": text,
      "log-warning": text,
      "log-error": text,
      "log-format": text,
      help: { type: "boolean" },
      ...MEMORY_OPTIONS,
      ...TRITON_ONLY_OPTIONS,
      ...VIDEOS_OPTIONS,
    },
  });
}

/** `<names>:<key>=<value>` with comma-separated names from Triton's API categories. */
function restriction(flag: string, spec: string): { names: string[]; key: string; value: string } {
  const match = /^([^:]+):([^=]+)=(.*)$/.exec(spec);
  if (!match) throw new UsageError(`invalid value for ${flag}: '${spec}' (expected <apis>:<key>=<value>)`);
  const names = (match[1] ?? "").split(",").map((n) => n.trim());
  for (const name of names) {
    if (!RESTRICTED_APIS.has(name))
      throw new UsageError(`unknown API '${name}' in ${flag} (expected one of ${[...RESTRICTED_APIS].join(", ")})`);
  }
  return { names, key: match[2] ?? "", value: match[3] ?? "" };
}

function bool(flag: string, value: string | undefined, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  const v = value.toLowerCase();
  if (v === "true" || v === "on" || v === "1") return true;
  if (v === "false" || v === "off" || v === "0") return false;
  throw new UsageError(`invalid value for ${flag}: '${value}' (expected true/on/1 or false/off/0)`);
}

function int(flag: string, value: string | undefined, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER) {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^-?\d+$/.test(value) || n < min || n > max) {
    throw new UsageError(`invalid value for ${flag}: '${value}' (expected an integer in [${min}, ${max}])`);
  }
  return n;
}

/** `--log-verbose` as tritonserver reads it: an integer, or true (1) / false (0); below 0 is 0. */
function logVerbose(value: string | undefined): number {
  if (value === undefined) return 0;
  try {
    return Math.max(0, tritonIntBool("log-verbose", value));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

function port(flag: string, value: string | undefined, fallback: number): number {
  return int(flag, value, fallback, 0, 65535);
}
