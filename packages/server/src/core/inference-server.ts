import { readFileSync } from "node:fs";
import { dataTypeToProtocol } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { DevicePlacement, DirectRecord, DirectRoute } from "../backend/backend.js";
import { now } from "../base/clock.js";
import type { Logger, LogSettings } from "../base/log.js";
import type { ResponseCache } from "../cache/response-cache.js";
import { LoadedModel } from "../repository/loaded-model.js";
import type {
  IndexEntry,
  LoadOverrides,
  MemoryBudgetLimits,
  MemoryCounters,
  MemoryUsage,
  ModelManager,
  OnDemandWait,
} from "../repository/model-manager.js";
import { directRoute, recordDirect } from "./direct-route.js";
import { RequestPipeline } from "./request-pipeline.js";

export type { LoadOverrides, MemoryBudgetLimits, MemoryCounters, MemoryUsage, OnDemandWait };

import { InferenceError } from "../base/errors.js";
import type { InferenceRequest, InferenceResponse, StreamedResponse } from "../base/inference-request.js";
import type { ModelStatistics } from "../base/statistics.js";
import type { GpuCopies } from "./gpu-copy.js";
import { applyLogSettings, type LogSettingValue } from "./log-settings.js";
import { SharedMemoryManager } from "./shared-memory.js";
import { TraceFiles } from "./trace-files.js";
import { DEFAULT_TRACE_CONFIG, TraceSettings, type TraceSettingsReport, type TraceUpdate } from "./trace-settings.js";

/** What `/v2` and the ServerMetadata RPC report. */
export interface ServerMetadata {
  /** `--id`; `triton` by default, because Triton's client examples check the name. */
  name: string;
  version: string;
  /** Protocol extensions this server implements, in Triton's order. */
  extensions: string[];
}

/** A tensor in model metadata: its name, protocol datatype and full shape (-1 for the batch). */
export interface TensorMetadata {
  name: string;
  datatype: string;
  shape: number[];
}

/** What model metadata reports (PROTOCOL.md §1.2). */
export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

/**
 * A READY model version as frontends see it: enough to read a request for it before the
 * inference (its config, whether it is decoupled) and to report on it (its statistics).
 */
export interface ModelView {
  readonly name: string;
  readonly version: number;
  readonly config: ModelConfig;
  readonly decoupled: boolean;
  readonly stats: ModelStatistics;
  /** What the version holds, measured across its load and warmup. */
  readonly memory: readonly MemoryUsage[];
  /** The most GPU working memory a batch of each size took (bytes by batch size), where measured. */
  readonly workingMemory?: ReadonlyMap<number, number>;
  /** The most host memory a warm-up batch of each size took (bytes by batch size), where measured. */
  readonly hostWorkingMemory?: ReadonlyMap<number, number>;
}

/** One entry of the repository index: a model folder, and a version's state when it has one. */
export type RepositoryIndexEntry = IndexEntry;

/** Options for {@link InferenceServer}. */
export interface InferenceServerOptions {
  models: ModelManager;
  log: Logger;
  /** Server name reported in metadata (tritonserver's `--id`). Default `triton`. */
  id?: string;
  /** `--strict-readiness` (default true): ready only when every model loaded. */
  strictReadiness?: boolean;
  /** The response cache (`--cache-config local,size=N`), for models with `response_cache { enable: true }`. */
  responseCache?: ResponseCache;
  /** System shared memory (`--allow-client-shm`); off when absent. */
  sharedMemory?: SharedMemoryManager;
  /** The trace extension (`--trace-config`); tracing is off when absent. */
  tracing?: TraceSettings;
  /** Copies of device tensors between this server's GPUs; absent: tensors on another GPU go through the host. */
  gpuCopies?: GpuCopies;
}

/**
 * Galley's release, reported as the server version: this package's `package.json` version, read
 * once at load (the file sits two folders up from both `src/core` and `dist/core`).
 */
export const GALLEY_VERSION: string = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/** The protocol extensions implemented: all of Triton's, in the order its `InferenceServer` lists them. */
export const EXTENSIONS = [
  "classification",
  "sequence",
  "model_repository",
  "model_repository(unload_dependents)",
  "schedule_policy",
  "model_configuration",
  "system_shared_memory",
  "cuda_shared_memory",
  "binary_tensor_data",
  "parameters",
  "statistics",
  "trace",
  "logging",
];

/** How long a request may wait for a load on demand: its `timeout` parameter (µs) and its cancellation. */
function waitOf(request: InferenceRequest): OnDemandWait {
  const timeout = request.parameters.timeout;
  return {
    ...(typeof timeout === "number" || typeof timeout === "bigint" ? { timeoutUs: Number(timeout) } : {}),
    ...(request.signal ? { signal: request.signal } : {}),
  };
}

/**
 * The protocol-neutral core. Frontends translate wire requests into calls on this object and
 * never hold state of their own; `infer` is the one path every inference takes.
 */
export class InferenceServer {
  readonly id: string;
  readonly models: ModelManager;
  /** The server's logger; the logging extension reads and changes its settings. */
  readonly log: Logger;
  readonly #strictReadiness: boolean;
  /** The response cache, when the server has one. */
  readonly cache: ResponseCache | undefined;
  #live = true;
  #accepting = true;

  constructor(options: InferenceServerOptions) {
    this.id = options.id ?? "triton";
    this.models = options.models;
    this.log = options.log;
    this.#strictReadiness = options.strictReadiness ?? true;
    this.cache = options.responseCache;
    this.sharedMemory = options.sharedMemory ?? new SharedMemoryManager(false);
    this.tracing = options.tracing ?? new TraceSettings(DEFAULT_TRACE_CONFIG, new TraceFiles(() => {}));
    this.#pipeline = new RequestPipeline(this.sharedMemory, this.cache, options.gpuCopies);
  }

  /** What every inference goes through (`request-pipeline.ts`). */
  readonly #pipeline: RequestPipeline;

  /**
   * The trace extension: frontends ask it for a trace of each request (`sample`), the core and
   * the schedulers record the request's timestamps in it.
   */
  readonly tracing: TraceSettings;

  /** Registered system shared-memory regions. */
  readonly sharedMemory: SharedMemoryManager;

  /** The process is up and able to answer; false only once shutdown has finished. */
  isLive(): boolean {
    return this.#live;
  }

  /** Ready for inference: not shutting down, and (strict readiness) every model loaded with its instances up. */
  isReady(): boolean {
    return (
      this.#live &&
      this.#accepting &&
      (!this.#strictReadiness ||
        (this.models.allModelsReady() && this.models.readyVersions().every((model) => model.healthy)))
    );
  }

  /** False once shutdown has begun: frontends refuse new work from then on. */
  get accepting(): boolean {
    return this.#accepting;
  }

  metadata(): ServerMetadata {
    return { name: this.id, version: GALLEY_VERSION, extensions: [...EXTENSIONS] };
  }

  /** Stop being ready (new work is refused) while in-flight work drains. */
  beginShutdown(): void {
    this.#accepting = false;
  }

  /** Shutdown finished: the server is no longer live. */
  stop(): void {
    this.#accepting = false;
    this.#live = false;
  }

  /**
   * Whether a model version is READY and, for a backend with its own readiness (a scripted model's
   * `isReady()`), says so. @throws {@link InferenceError} NOT_FOUND for an unknown model.
   */
  async modelReady(name: string, version: string): Promise<boolean> {
    try {
      const model = this.models.resolve(name, version);
      const answer = model.healthy
        ? ((await model.backend.isReady?.()) ?? true)
        : (model.backend.unhealthy?.() ?? false);
      if (answer === true) return true;
      // As Triton's core: why, at verbose level 1.
      if (typeof answer === "string") {
        this.log.verbose(1, `Model '${model.name}' version ${model.version} is not ready: ${answer}`);
      }
      return false;
    } catch (error) {
      if (error instanceof InferenceError && error.id === "MODEL_NOT_FOUND") throw error;
      if (error instanceof InferenceError && error.id === "BAD_VERSION") throw error;
      return false;
    }
  }

  /** A model's final config (the given version, or the highest READY one). */
  modelConfig(name: string, version: string): ModelConfig {
    return this.models.resolve(name, version).config;
  }

  /** Model metadata: versions (the requested one, or every READY one), platform and tensors. */
  modelMetadata(name: string, version: string): ModelMetadata {
    const model = this.models.resolve(name, version);
    const config = model.config;
    const versions = version === "" ? this.models.readyVersions(name).map((m) => String(m.version)) : [version];
    const shape = (dims: bigint[]) => [...(config.maxBatchSize > 0 ? [-1] : []), ...dims.map(Number)];
    return {
      name,
      versions,
      platform: config.platform !== "" ? config.platform : config.backend,
      inputs: config.input.map((i) => ({
        name: i.name,
        datatype: dataTypeToProtocol(i.dataType),
        shape: shape(i.dims),
      })),
      outputs: config.output.map((o) => ({
        name: o.name,
        datatype: dataTypeToProtocol(o.dataType),
        shape: shape(o.dims),
      })),
    };
  }

  /**
   * The model version a request names (the given version, or the highest READY one).
   * @throws {@link InferenceError} NOT_FOUND / UNAVAILABLE as Triton answers for it.
   */
  model(name: string, version: string): ModelView {
    return this.models.resolve(name, version);
  }

  /**
   * The model version a request for inference runs on: as {@link model}, except that with loading
   * on demand (`--load-on-demand`) a repository model with no READY version is loaded first, and
   * the answer is then a promise, bounded by `wait` and the server's limit.
   *
   * @throws {@link InferenceError} as {@link model}, or why the load on demand failed.
   */
  inferenceModel(name: string, version: string, wait?: OnDemandWait): ModelView | Promise<ModelView> {
    return this.models.acquire(name, version, wait);
  }

  /** Loads on demand and evictions so far, by model (the metrics endpoint reports them). */
  memoryCounters(): MemoryCounters {
    return this.models.counters;
  }

  /** `--model-memory-budget`, when there is one. */
  memoryBudget(): MemoryBudgetLimits | undefined {
    return this.models.memoryBudget;
  }

  /** Whether `--gpu-memory-admission` is on (its counters are then on the metrics). */
  gpuMemoryAdmission(): boolean {
    return this.models.gpuMemoryAdmission;
  }

  /** Every READY model version (the metrics endpoint reports them). */
  readyModels(): ModelView[] {
    return this.models.readyVersions();
  }

  /** Every model folder of the repositories with its versions' states; `ready` keeps the READY ones. */
  repositoryIndex(ready: boolean, repository = ""): Promise<RepositoryIndexEntry[]> {
    if (repository !== "") return Promise.reject(new InferenceError("REPOSITORY_NAME_UNSUPPORTED"));
    return this.models.index(ready);
  }

  /**
   * Load (or reload) a model with Triton's rules, in Triton's order: the request names no
   * repository (Galley serves one namespace), then its overrides are read (`readOverrides`: the
   * frontend's own parameter rules), then model control must be explicit; the repository checks
   * the `config` and `file:` overrides themselves.
   */
  async loadModel(
    name: string,
    repository: string,
    readOverrides: () => LoadOverrides | Promise<LoadOverrides> = () => ({}),
  ): Promise<void> {
    if (repository !== "") throw new InferenceError("REPOSITORY_NAME_UNSUPPORTED");
    const { config, files } = await readOverrides();
    this.#checkControl();
    await this.models.load(name, { ...(config !== undefined ? { config } : {}), files: files ?? new Map() });
  }

  /**
   * Unload a model and, when `readDependents` says so (`unload_dependents`), the models loaded for
   * it; the same rules and order as {@link loadModel}.
   */
  async unloadModel(
    name: string,
    repository: string,
    readDependents: () => boolean | Promise<boolean> = () => false,
  ): Promise<void> {
    if (repository !== "") throw new InferenceError("REPOSITORY_NAME_UNSUPPORTED");
    const dependents = await readDependents();
    this.#checkControl();
    await this.models.unload(name, dependents);
  }

  #checkControl(): void {
    if (this.models.controlMode !== "explicit") throw new InferenceError("CONTROL_DISABLED");
  }

  /**
   * The logging extension: apply `changes` (`null` leaves a setting as it is) and return the
   * settings in force.
   */
  logSettings(changes: Record<string, LogSettingValue> = {}): LogSettings {
    return applyLogSettings(this.log, changes);
  }

  /**
   * The trace extension's settings: global (`model` "") or one model's. With `readChange`, the
   * change it reads is applied first (a POST), in Triton's order: the model must be ready (400
   * otherwise), then the change is read (the frontend's own parsing rules), then applied.
   * @throws {@link InferenceError} as Triton answers.
   */
  traceSettings(model = "", readChange?: () => TraceUpdate): TraceSettingsReport {
    if (model !== "" && this.models.readyVersions(model).length === 0)
      throw new InferenceError("TRACE_UNKNOWN_MODEL", { model });
    if (!readChange) return this.tracing.report(model);
    return this.tracing.update(model, readChange());
  }

  /**
   * Where a READY model version runs when it takes and keeps tensors on a GPU
   * (`BackendModel.deviceTensors`); undefined for host-only models and unknown names.
   */
  devicePlacement(name: string, version: string): DevicePlacement | undefined {
    try {
      const model = this.models.resolve(name, version);
      // A response cache reads the bytes: such a model gets host tensors (see #placeTensors).
      if (model.config.responseCache?.enable && this.cache) return undefined;
      return model.backend.deviceTensors;
    } catch {
      return undefined;
    }
  }

  /** READY versions for the statistics extension. */
  statistics(name: string, version: string): LoadedModel[] {
    if (name === "") return this.models.readyVersions();
    if (version !== "") return [this.models.resolve(name, version)];
    const ready = this.models.readyVersions(name);
    if (ready.length === 0) throw new InferenceError("STATS_MODEL_UNAVAILABLE", { model: name });
    return ready;
  }

  /**
   * Run one inference: find the model version, check the request against its config, schedule
   * it, and apply the classification extension to the outputs that ask for it.
   *
   * @throws {@link InferenceError} with Triton's code and message.
   */
  infer(request: InferenceRequest, resolved?: ModelView): Promise<InferenceResponse> {
    const start = now();
    try {
      const found = this.#loaded(request, resolved);
      if (found instanceof Promise) return found.then((model) => this.#infer(model, request, start));
      return this.#infer(found, request, start);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Run `request` on `model`, which counts it as busy (not evictable) until it ends. */
  #infer(model: LoadedModel, request: InferenceRequest, start: bigint): Promise<InferenceResponse> {
    this.models.hold(model);
    const release = () => this.models.release(model);
    const trace = request.trace;
    try {
      if (!trace) return this.#pipeline.infer(model, request, start).finally(release);
      trace.start(model.name, model.version, request.id, start);
      return this.#pipeline.infer(model, request, start).finally(() => {
        release();
        trace.capture("REQUEST_END");
      });
    } catch (error) {
      release();
      throw error;
    }
  }

  /**
   * The route a scripted model's worker takes to run `name`'s batches itself (BLS calls marked
   * `direct`), when the version is ready and allows it (see `directRoute`).
   */
  directRoute(name: string, version: string): DirectRoute | undefined {
    try {
      return directRoute(this.models.resolve(name, version));
    } catch {
      return undefined;
    }
  }

  /** Count a direct call in its model's statistics (ignored once that version is gone). */
  recordDirect(record: DirectRecord): void {
    let model: LoadedModel;
    try {
      model = this.models.resolve(record.model, String(record.version));
    } catch {
      return;
    }
    if (model.version === record.version) recordDirect(model, record);
  }

  /**
   * Run one inference on any model and yield its responses as they come: exactly one for a
   * default-mode model, zero or many for a decoupled model (then a last one marked `final`,
   * possibly `empty`). An error ends the iteration by throwing; leaving the loop early cancels
   * a decoupled request.
   *
   * @throws {@link InferenceError} with Triton's code and message.
   */
  async *stream(request: InferenceRequest, resolved?: ModelView): AsyncGenerator<StreamedResponse> {
    const found = this.#loaded(request, resolved);
    const model = found instanceof Promise ? await found : found;
    if (!model.decoupled) {
      request.streamed = true;
      yield { response: await this.infer(request, model), final: true, empty: false };
      return;
    }
    this.models.hold(model);
    try {
      yield* this.#pipeline.stream(model, request);
    } finally {
      this.models.release(model);
    }
  }

  /**
   * The model a request runs on: the one a frontend resolved for it just before (from
   * {@link model}, with nothing awaited in between, so it cannot have been unloaded), or the
   * one the request names.
   */
  #loaded(request: InferenceRequest, resolved: ModelView | undefined): LoadedModel | Promise<LoadedModel> {
    // An evicted version was taken out of service after the frontend found it: look again.
    if (resolved instanceof LoadedModel && !resolved.evicted) return resolved;
    return this.models.acquire(request.modelName, request.modelVersion, waitOf(request), request.id);
  }
}
