import type { AddressInfo } from "node:net";
import { allocateCudaMemory, openCudaIpcHandle, probeCuda } from "@galley/backends-native";
import { createJsBackend, type JsIsolation } from "./backend/js/js-backend.js";
import { createOnnxRuntimeBackend } from "./backend/onnxruntime/onnxruntime-backend.js";
import { CustomMetrics } from "./backend/python/custom-metrics.js";
import {
  createPythonBackend,
  PYTHON_BASED_BACKENDS_DIR,
  type PythonBackendOptions,
  pythonBasedBackends,
} from "./backend/python/python-backend.js";
import { createPyTorchBackend } from "./backend/pytorch/pytorch-backend.js";
import { BackendRegistry } from "./backend/registry.js";
import type { Clock } from "./base/clock.js";
import type { DeviceMemoryReader } from "./base/device-memory.js";
import { shrinkHeap } from "./base/heap.js";
import type { InferenceRequest, InferenceResponse } from "./base/inference-request.js";
import { createLogger, type Logger } from "./base/log.js";
import { ResponseCache } from "./cache/response-cache.js";
import { GpuCopies } from "./core/gpu-copy.js";
import { InferenceServer } from "./core/inference-server.js";
import { DEFAULT_OPENTELEMETRY_CONFIG } from "./core/opentelemetry-config.js";
import { SharedMemoryManager } from "./core/shared-memory.js";
import { TraceFiles } from "./core/trace-files.js";
import { DEFAULT_TRACE_CONFIG, type TraceConfig, TraceSettings } from "./core/trace-settings.js";
import { checkEndpoints, type Endpoint, type EndpointAddress, EndpointError } from "./endpoint-error.js";
import { createGrpcFrontend } from "./frontend/grpc/grpc-frontend.js";
import type { GrpcFrontendOptions } from "./frontend/grpc/grpc-options.js";
import { createRestFrontend, type HttpFrontendOptions } from "./frontend/http/rest-frontend.js";
import { type GpuMetrics, startGpuMetrics } from "./frontend/metrics/gpu-metrics.js";
import { createMetricsHandler, type MetricsOptions } from "./frontend/metrics/metrics-handler.js";
import { nvmlGpuSource } from "./frontend/metrics/nvml-gpu-source.js";
import { listenHttp1 } from "./frontend/transport/listen-http1.js";
import { listenHttp2 } from "./frontend/transport/listen-http2.js";
import type { Listener } from "./frontend/transport/listener.js";
import { createVideosFrontend, type VideosFrontend } from "./frontend/videos/videos-frontend.js";
import { nvmlMemoryReader } from "./gpu-memory.js";
import { gpuFinder } from "./gpus.js";
import { createJobService, type JobService, type JobsOptions } from "./jobs/job-service.js";
import { gpuMemorySource, hostMemorySource, measureWith } from "./repository/memory-source.js";
import {
  type ControlMode,
  type MemoryBudgetLimits,
  type MemorySource,
  ModelManager,
} from "./repository/model-manager.js";
import { GpuMemoryAdmission } from "./scheduler/gpu-memory-admission.js";
import { RateLimiter, type ResourceLimit } from "./scheduler/rate-limiter.js";

/** `--gpu-memory-admission`'s settings (see {@link ServerOptions.gpuMemoryAdmission}). */
export interface GpuMemoryAdmissionSettings {
  /** `--gpu-memory-reserve`: bytes of each GPU's free memory no batch may take (default 512 MiB). */
  reserveBytes: number;
  /** `--gpu-memory-wait-secs`: the longest a batch waits for room before its requests get UNAVAILABLE (default 10). */
  waitSecs: number;
}

/** Where a frontend listens. Port 0 picks a free port (see {@link GalleyServer.listen}). */
export interface EndpointOptions {
  /** Default `0.0.0.0`. */
  host?: string;
  port: number;
}

/** Options for {@link createServer}. Defaults mirror tritonserver's flags. */
export interface ServerOptions {
  /** `--model-repository` (repeatable). */
  modelRepositories?: string[];
  /** Server name in metadata (`--id`). Default `triton`. */
  id?: string;
  /** KServe v2 REST (`--http-port`, default 8000). `false` disables it (`--allow-http=false`). */
  http?: (EndpointOptions & HttpFrontendOptions) | false;
  /** gRPC, gRPC-Web and Connect (`--grpc-port`, default 8001). `false` disables it. */
  grpc?: (EndpointOptions & GrpcFrontendOptions) | false;
  /** Prometheus metrics (`--metrics-port`, default 8002). `false` disables them. */
  metrics?: (EndpointOptions & MetricsOptions) | false;
  /** `--model-control-mode`: `none` (default), `poll` or `explicit`. */
  controlMode?: ControlMode;
  /** `--load-model` for explicit mode; `*` loads everything. */
  loadModels?: string[];
  /**
   * `--load-on-demand` (explicit mode only; default false): an inference request (HTTP, gRPC, an
   * ensemble step, a BLS call) for a repository model with no READY version loads it, and waits
   * for the load. Off, explicit mode is Triton's.
   */
  loadOnDemand?: boolean;
  /** `--load-on-demand-wait-secs` (default 120): the longest a request waits for a load on demand (its own `timeout` may be shorter). */
  loadOnDemandWaitSecs?: number;
  /**
   * `--model-memory-budget` (needs `loadOnDemand`): host bytes and bytes per GPU the loaded models
   * may hold together, each limit kept alike; idle models are evicted least recently used first.
   */
  modelMemoryBudget?: MemoryBudgetLimits;
  /** `--model-min-residency` (default 30): seconds after its load during which a model is never evicted. */
  modelMinResidencySecs?: number;
  /**
   * `--gpu-memory-admission`: a dynamic batch for an instance on a GPU starts only when its
   * working memory (measured per batch size at warmup and as the model runs) fits the GPU's free
   * memory less `reserveBytes` (`--gpu-memory-reserve`, default 512 MiB); otherwise a smaller batch
   * goes, or the batch waits up to `waitSecs` (`--gpu-memory-wait-secs`, default 10), after which
   * its requests get UNAVAILABLE. Off (the default), batches start as in Triton.
   */
  gpuMemoryAdmission?: GpuMemoryAdmissionSettings;
  /**
   * Where GPU memory figures come from (default: NVML and the PyTorch allocator).
   *
   * @internal
   */
  deviceMemory?: DeviceMemoryReader;
  /**
   * Measures each model version's memory across its load (default: host RSS and stub processes, and
   * GPU memory per GPU from {@link ServerOptions.deviceMemory}).
   *
   * @internal
   */
  memorySource?: MemorySource;
  /**
   * Time for model residency, recency and load-on-demand waits (tests drive it).
   *
   * @internal
   */
  clock?: Clock;
  /** `--repository-poll-secs` (default 15). */
  pollSecs?: number;
  /** `--strict-readiness` (default true). */
  strictReadiness?: boolean;
  /** `--disable-auto-complete-config` sets this false. */
  autoComplete?: boolean;
  /** `--backend-config=onnxruntime,default-max-batch-size=N` (default 4). */
  onnxDefaultMaxBatchSize?: number;
  /** `--backend-config=python,python-executable=<path>` (default `python3` on PATH). */
  pythonExecutable?: string;
  /**
   * `--backend-directory`: where Triton's Python-based backends are found. A config whose
   * `backend` names none of Galley's own backends runs `<backendDirectory>/<backend>/model.py`
   * with the Python backend when that file exists. Default: none.
   */
  backendDirectory?: string;
  /** `--backend-config=js,default-isolation=thread|shared`: `isolation` for scripted models that set none (default `thread`). */
  jsDefaultIsolation?: JsIsolation;
  /** `--model-load-thread-count` (default 4). */
  modelLoadThreads?: number;
  /** `--model-load-retry-count` (default 0): how many more times a version that fails to load is tried. */
  modelLoadRetries?: number;
  /** `--model-config-name`. */
  modelConfigName?: string;
  /** `--cache-config local,size=N` / `--response-cache-byte-size`: the response cache's capacity in bytes. */
  responseCacheBytes?: number;
  /** `--allow-client-shm` (default false, as in Triton): clients may register system and CUDA shared memory. */
  allowClientShm?: boolean;
  /**
   * The GPU ids this server may use (KIND_GPU instances, CUDA shared-memory regions). Default:
   * every device the CUDA driver reports (none where there is no driver). An id the driver does
   * not have fails where it is used, with the driver's error.
   */
  gpus?: readonly number[];
  /** `--rate-limit`: `off` (default) or `execution_count`. */
  rateLimit?: "off" | "execution_count";
  /** `--rate-limit-resource <name>:<count>[:<device>]`. */
  rateLimitResources?: ResourceLimit[];
  /**
   * `--exit-on-error` (default false here, true in `galley serve`): when a startup model fails to
   * load, {@link GalleyServer.listen} opens no port and resolves with the failures only.
   */
  exitOnError?: boolean;
  /**
   * How long `close()` waits for in-flight requests (`--exit-timeout-secs`, default 30); also how
   * long an unload waits for a Python or JS model's requests before it ends the instances still
   * executing.
   */
  exitTimeoutSecs?: number;
  /**
   * The trace extension's startup settings (`--trace-config`): level, rate, count, log frequency
   * and file, Triton's defaults (OFF, 1000, -1, 0, none) for what is left out. The trace-setting
   * API changes them at run time, except the file. `mode: "opentelemetry"` exports spans over
   * OTLP/HTTP instead (see {@link OpenTelemetryConfig}); `close()` then exports what is queued,
   * within what is left of `exitTimeoutSecs` (less {@link TRACE_FLUSH_MARGIN_MS}).
   */
  trace?: Partial<TraceConfig>;
  /**
   * `--videos-api` and its `--jobs-*` / `--videos-*` flags: asynchronous video jobs on the HTTP
   * port (`/v1/videos`, docs/guides/videos-api.md). Off when left out; needs `http`.
   */
  jobs?: JobsOptions;
  log?: Logger;
}

/**
 * How long before the end of `exitTimeoutSecs` the OpenTelemetry exporter's last export is given
 * up at shutdown, so that the server stops within it (`galley serve` exits 1 past it).
 */
export const TRACE_FLUSH_MARGIN_MS = 250;

/** The addresses actually bound, once listening. */
export interface ServerAddresses {
  http?: AddressInfo;
  grpc?: AddressInfo;
  metrics?: AddressInfo;
}

/** A Galley server: the core, its model manager, and its network frontends. */
export interface GalleyServer {
  /** The protocol-neutral core the frontends call. */
  readonly core: InferenceServer;
  /**
   * Check that every enabled frontend can bind its address, load the models the control mode
   * loads, then bind the frontends (as Triton, nothing listens while the startup loads run); in
   * between, one full collection gives back the memory start-up left behind (~50 ms, see
   * `shrinkHeap`). Resolves with the bound addresses and the models that failed to load (the
   * server keeps running without them). Rejects with an {@link EndpointError} for a port that is
   * taken (or an address it cannot bind): before any model loads, or, where another process took
   * the port while they loaded, with the listeners already bound closed again.
   */
  listen(): Promise<ServerAddresses & { failedModels: string[] }>;
  /** Stop being ready, drain in-flight requests (up to the exit timeout), unload models, close the listeners. */
  close(): Promise<void>;
}

/**
 * Create a Galley server.
 *
 * @example
 * const server = createServer({ modelRepositories: ["./models"], http: { host: "127.0.0.1", port: 0 }, grpc: false, metrics: false });
 * const { http } = await server.listen();
 * const res = await fetch(`http://127.0.0.1:${http?.port}/v2/health/ready`); // 200
 * await server.close();
 */
export function createServer(options: ServerOptions = {}): GalleyServer {
  const log = options.log ?? createLogger();
  const configuredGpus = options.gpus;
  const gpus = configuredGpus ? async () => configuredGpus : gpuFinder(log);
  const deviceMemory = options.deviceMemory ?? nvmlMemoryReader();
  const admission = options.gpuMemoryAdmission
    ? new GpuMemoryAdmission({
        reader: deviceMemory,
        reserveBytes: options.gpuMemoryAdmission.reserveBytes,
        waitMs: options.gpuMemoryAdmission.waitSecs * 1000,
        log,
        ...(options.clock ? { clock: options.clock } : {}),
      })
    : undefined;
  /** This server's models' own metric families (`pb_utils.MetricFamily`), after Galley's on /metrics. */
  const customMetrics = new CustomMetrics();
  const graceMs = (options.exitTimeoutSecs ?? 30) * 1000;
  const pythonOptions: PythonBackendOptions = {
    log,
    inference: () => core,
    metrics: customMetrics,
    unloadTimeoutMs: graceMs,
    ...(options.pythonExecutable ? { pythonExecutable: options.pythonExecutable } : {}),
  };
  const userBackends = options.backendDirectory
    ? pythonBasedBackends(options.backendDirectory, pythonOptions)
    : undefined;
  const ownBackends = pythonBasedBackends(PYTHON_BASED_BACKENDS_DIR, pythonOptions);
  const backends = new BackendRegistry(
    [
      createJsBackend({
        log,
        inference: () => core,
        unloadTimeoutMs: graceMs,
        ...(options.jsDefaultIsolation ? { defaultIsolation: options.jsDefaultIsolation } : {}),
      }),
      createOnnxRuntimeBackend({
        log,
        ...(options.onnxDefaultMaxBatchSize ? { defaultMaxBatchSize: options.onnxDefaultMaxBatchSize } : {}),
      }),
      createPythonBackend(pythonOptions),
      createPyTorchBackend({ log }),
    ],
    // A user's --backend-directory first, then Galley's own Python-based backends (`pytorch` with
    // `runtime: "model.py"` serves PyTorch-2 model.py models through the Python backend).
    (name) => userBackends?.(name) ?? ownBackends(name),
  );
  const models: ModelManager = new ModelManager({
    repositories: options.modelRepositories ?? [],
    backends,
    log,
    controlMode: options.controlMode ?? "none",
    startupModels: options.loadModels ?? [],
    autoComplete: options.autoComplete ?? true,
    gpus,
    ...(options.modelLoadThreads ? { loadThreads: options.modelLoadThreads } : {}),
    ...(options.modelLoadRetries ? { loadRetries: options.modelLoadRetries } : {}),
    ...(options.modelConfigName ? { configName: options.modelConfigName } : {}),
    ...(options.rateLimit === "execution_count"
      ? { rateLimiter: new RateLimiter(options.rateLimitResources ?? []) }
      : {}),
    ...(options.loadOnDemand
      ? {
          onDemand: {
            ...(options.loadOnDemandWaitSecs !== undefined ? { waitMs: options.loadOnDemandWaitSecs * 1000 } : {}),
          },
        }
      : {}),
    ...(options.modelMemoryBudget ? { memoryBudget: options.modelMemoryBudget } : {}),
    ...(options.modelMinResidencySecs !== undefined ? { minResidencySecs: options.modelMinResidencySecs } : {}),
    memory: options.memorySource ?? measureWith([hostMemorySource(), gpuMemorySource(deviceMemory)]),
    deviceMemory,
    ...(admission ? { admission } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.metrics !== false && options.metrics?.histogramLatencies ? { histogramLatencies: true } : {}),
    // Ensembles run their steps through the core, so each step is validated, scheduled and counted.
    // and learn where each step's model runs, to hand tensors over on a GPU between such steps.
    infer: Object.assign((request: InferenceRequest): Promise<InferenceResponse> => core.infer(request), {
      placement: (model: string, version: string) => core.devicePlacement(model, version),
    }),
  });
  const core = new InferenceServer({
    id: options.id ?? "triton",
    models,
    log,
    strictReadiness: options.strictReadiness ?? true,
    ...(options.responseCacheBytes ? { responseCache: new ResponseCache(options.responseCacheBytes) } : {}),
    sharedMemory: new SharedMemoryManager(options.allowClientShm ?? false, { gpus, open: openCudaIpcHandle, log }),
    // Tensors on one GPU read by a model on another go device to device (used only where there are).
    gpuCopies: new GpuCopies(
      { allocate: allocateCudaMemory, peerAccess: async () => (await probeCuda()).peerAccess ?? [] },
      log,
    ),
    tracing: new TraceSettings(
      { ...DEFAULT_TRACE_CONFIG, ...options.trace },
      new TraceFiles((message) => log.error(message)),
    ),
  });
  const http = options.http === undefined ? { port: 8000 } : options.http;
  const grpc = options.grpc === undefined ? { port: 8001 } : options.grpc;
  const metrics = options.metrics === undefined ? { port: 8002 } : options.metrics;
  const listeners: Listener[] = [];
  let poller: NodeJS.Timeout | undefined;
  let gpuMetrics: GpuMetrics | undefined;
  let jobs: JobService | undefined;
  let videos: VideosFrontend | undefined;
  /** Set by close(): a listen() still starting up stops where it is. */
  let closing = false;

  return {
    core,
    async listen() {
      const addresses: ServerAddresses = {};
      if (core.tracing.mode === "opentelemetry") {
        // The OpenTelemetry SDK (~80 ms to import) is loaded only by servers that export spans.
        const { SpanExport } = await import("./core/span-export.js");
        const config = options.trace?.opentelemetry ?? DEFAULT_OPENTELEMETRY_CONFIG;
        core.tracing.exportSpans(new SpanExport(config, (message) => log.error(message)));
      }
      const metricsHost = metrics ? (metrics.host ?? (http ? http.host : undefined) ?? "0.0.0.0") : "";
      const endpoints: EndpointAddress[] = [];
      if (grpc) endpoints.push({ endpoint: "grpc", host: grpc.host ?? "0.0.0.0", port: grpc.port });
      if (http) endpoints.push({ endpoint: "http", host: http.host ?? "0.0.0.0", port: http.port });
      if (metrics) endpoints.push({ endpoint: "metrics", host: metricsHost, port: metrics.port });
      // A port that is taken fails the start now, not after a minute of loading models.
      await checkEndpoints(endpoints);
      await warnUnseenGpus(options.modelMemoryBudget, deviceMemory, log);
      // As Triton: the endpoints open once the startup loads are done, so a client never sees a
      // live server that still answers "no available versions" for a model it was told to serve.
      const failedModels = await models.start();
      if (closing) return { ...addresses, failedModels: [] };
      if (failedModels.length > 0 && options.exitOnError) return { failedModels };
      shrinkHeap();
      /** Bind one frontend; a bind that fails closes those already bound and rejects with an EndpointError. */
      const open = async (endpoint: Endpoint, host: string, port: number, start: () => Promise<Listener>) => {
        try {
          const listener = await start();
          listeners.push(listener);
          return listener;
        } catch (error) {
          gpuMetrics?.close();
          await Promise.all(listeners.splice(0).map((l) => l.close(0)));
          throw new EndpointError(endpoint, host, port, error as NodeJS.ErrnoException);
        }
      };
      if (grpc) {
        const frontend = createGrpcFrontend(core, grpc);
        const host = grpc.host ?? "0.0.0.0";
        const listener = await open("grpc", host, grpc.port, () =>
          listenHttp2(frontend.handler, host, grpc.port, grpc, frontend.serveStream),
        );
        addresses.grpc = listener.address;
      }
      if (http) {
        // Load reports read the GPU metrics started below (once they are), as Triton's read its metrics.
        const load = metrics
          ? { metricsText: () => customMetrics.render(), gpuMemoryFreeBytes: () => gpuMetrics?.memoryFreeBytes() }
          : undefined;
        let rest = createRestFrontend(core, load ? { ...http, load } : http);
        if (options.jobs) {
          // The videos API answers its own paths beside the KServe routes, on Node's HTTP path.
          jobs = await createJobService(core, options.jobs, log);
          const api = createVideosFrontend(core, jobs, log, { page: options.jobs.page === true });
          videos = api;
          const kserve = rest.handle;
          rest = { ...rest, handle: (request) => (api.owns(request.target) ? api.handle(request) : kserve(request)) };
        }
        const host = http.host ?? "0.0.0.0";
        const listener = await open("http", host, http.port, () => listenHttp1(rest, host, http.port, http));
        addresses.http = listener.address;
      }
      if (metrics) {
        if (metrics.allowGpuMetrics ?? true) {
          gpuMetrics = await startGpuMetrics({
            source: metrics.gpuSource ?? nvmlGpuSource(),
            ...(metrics.intervalMs ? { intervalMs: metrics.intervalMs } : {}),
            log,
          });
        }
        const handler = createMetricsHandler(core, { extra: () => customMetrics.render(), ...metrics }, gpuMetrics);
        const listener = await open("metrics", metricsHost, metrics.port, () =>
          listenHttp1({ handle: handler }, metricsHost, metrics.port),
        );
        addresses.metrics = listener.address;
      }
      if (closing) {
        // close() came while the listeners were binding: it may have missed the late ones.
        gpuMetrics?.close();
        videos?.close();
        await jobs?.close();
        await Promise.all(listeners.splice(0).map((l) => l.close(graceMs)));
        return { ...addresses, failedModels: [] };
      }
      if ((options.controlMode ?? "none") === "poll") {
        const every = Math.max(1, options.pollSecs ?? 15) * 1000;
        const tick = () => {
          poller = setTimeout(() => {
            models
              .poll()
              .catch((error: unknown) => log.error(`repository poll failed: ${String(error)}`))
              .finally(() => {
                if (poller) tick();
              });
          }, every);
          poller.unref();
        };
        tick();
      }
      return { ...addresses, failedModels };
    },
    async close() {
      const closeStart = Date.now();
      closing = true;
      core.beginShutdown();
      models.stopLoading();
      if (poller) clearTimeout(poller);
      poller = undefined;
      gpuMetrics?.close();
      // Event streams end and running jobs are queued again before the models stop under them.
      videos?.close();
      await jobs?.close();
      await Promise.all(listeners.splice(0).map((l) => l.close(graceMs)));
      await models.stop();
      admission?.close();
      await core.tracing.close(Math.max(0, graceMs - (Date.now() - closeStart) - TRACE_FLUSH_MARGIN_MS));
      await core.sharedMemory.close();
      core.stop();
    },
  };
}

/** A `--model-memory-budget gpu<N>:` part for a GPU NVML does not show holds nothing: say so once, at start. */
async function warnUnseenGpus(
  budget: MemoryBudgetLimits | undefined,
  reader: DeviceMemoryReader,
  log: Logger,
): Promise<void> {
  if (!budget?.gpus?.size) return;
  const seen = await reader.read();
  for (const id of budget.gpus.keys()) {
    if (seen.has(id)) continue;
    log.warn(
      `--model-memory-budget gpu${id}: no GPU ${id} in NVML's figures (${seen.size === 0 ? "no GPU or no NVML" : `GPUs ${[...seen.keys()].join(", ")}`}); models hold nothing there as far as the budget knows`,
    );
  }
}
