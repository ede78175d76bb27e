import type { BackendRegistry } from "../backend/registry.js";
import { type Clock, systemClock } from "../base/clock.js";
import type { DeviceMemoryReader } from "../base/device-memory.js";
import { InferenceError } from "../base/errors.js";
import type { LoadOverrides } from "../base/load-overrides.js";
import type { Logger } from "../base/log.js";
import type { ComposingInfer } from "../scheduler/ensemble-scheduler.js";
import type { GpuMemoryAdmission } from "../scheduler/gpu-memory-admission.js";
import type { RateLimiter } from "../scheduler/rate-limiter.js";
import { type ControlMode, pollRepositories, startupModels } from "./control-mode.js";
import { LoadChecks } from "./load-checks.js";
import { LoadPipeline } from "./load-pipeline.js";
import type { LoadedModel } from "./loaded-model.js";
import { MemoryBudget, type MemoryBudgetLimits } from "./memory-budget.js";
import type { MemorySource, MemoryUsage } from "./memory-source.js";
import { type ModelEntry, modelEntry } from "./model-entry.js";
import { validateModelName } from "./model-name.js";
import { type ModelRepository, scanRepositories } from "./model-repository.js";
import { EVICTED_REASON, type IndexEntry, type VersionStatus } from "./model-versions.js";
import { OnDemandLoads, type OnDemandWait } from "./on-demand.js";
import { openRepository } from "./open-repository.js";
import { VersionLoader } from "./version-loader.js";

export type { LoadOverrides } from "../base/load-overrides.js";
export type { ControlMode } from "./control-mode.js";
export type { MemoryBudgetLimits } from "./memory-budget.js";
export type { MemorySource, MemoryUsage } from "./memory-source.js";
export type { IndexEntry, ModelState, VersionStatus } from "./model-versions.js";
export type { OnDemandWait } from "./on-demand.js";

/** Options for {@link ModelManager}; defaults are tritonserver's. */
export interface ModelManagerOptions {
  /** `--model-repository`: folders, or `s3://` locations (see `openRepository`). */
  repositories: readonly string[];
  backends: BackendRegistry;
  log: Logger;
  controlMode?: ControlMode;
  /** `--load-model` (explicit mode); `*` loads everything. */
  startupModels?: readonly string[];
  /** `--disable-auto-complete-config` turns this off. */
  autoComplete?: boolean;
  /** The GPU ids this server can use, found once (see `LoadChecksOptions.gpus`). */
  gpus?: () => Promise<readonly number[]>;
  /** `--model-load-thread-count` (default 4). */
  loadThreads?: number;
  /** `--model-load-retry-count` (default 0): loads of a version that fails, tried again at once. */
  loadRetries?: number;
  /** `--model-config-name`. */
  configName?: string;
  /** How an ensemble runs its steps: the server's own inference path. */
  infer?: ComposingInfer;
  /** `--rate-limit execution_count`: instances execute only with their resources. */
  rateLimiter?: RateLimiter;
  /**
   * `--load-on-demand` (explicit mode only): a request for a repository model with no READY
   * version loads it; `waitMs` (`--load-on-demand-wait-secs`) bounds how long the request waits.
   */
  onDemand?: { waitMs?: number };
  /** `--model-memory-budget`: idle models are evicted, least recently used first, to stay under it. */
  memoryBudget?: MemoryBudgetLimits;
  /** `--model-min-residency` in seconds (default 30): no model is evicted sooner after its load. */
  minResidencySecs?: number;
  /** Measures each version's memory across its load (default: host RSS). */
  memory?: MemorySource;
  /** `--gpu-memory-admission`: batches on a GPU start only when their working memory fits. */
  admission?: GpuMemoryAdmission;
  /** NVML's per-process figures, for the GPU working memory of Python stubs at warmup. */
  deviceMemory?: DeviceMemoryReader;
  /** Time for residency, recency and on-demand waits (tests control it). */
  clock?: Clock;
}

/** What a lookup answers for a model with no READY version: with loading on demand, it loads. */
const NOT_LOADED: ReadonlySet<string> = new Set(["MODEL_NOT_FOUND", "MODEL_NO_VERSIONS", "MODEL_VERSION_NOT_READY"]);

/** Counts per model name for metrics: loads started on demand, requests waiting for one now, evictions. */
export interface MemoryCounters {
  onDemandLoads: ReadonlyMap<string, number>;
  waiting: ReadonlyMap<string, number>;
  evictions: ReadonlyMap<string, number>;
  /** `--metrics-config histogram_latencies=true`: each version keeps its first-response histogram. */
  histogramLatencies?: boolean;
}

/**
 * The model repository manager: finds models in the repositories, loads and unloads them as the
 * control mode allows, keeps the index with states and reasons, and routes requests to READY
 * versions. A reload keeps the old versions serving until the new ones are ready; a model that
 * fails to load never takes the server down. Loads and unloads of one model run one after the
 * other; the steps of a load are `LoadPipeline`'s, the version states `ModelVersions`'.
 */
export class ModelManager {
  readonly #options: ModelManagerOptions;
  readonly #models = new Map<string, ModelEntry>();
  readonly #pipeline: LoadPipeline;
  readonly #clock: Clock;
  readonly #onDemand: OnDemandLoads | undefined;
  readonly #budget: MemoryBudget | undefined;
  /** Each version's memory when last loaded (`name/version`): what the budget makes room for next time. */
  readonly #lastMeasured = new Map<string, readonly MemoryUsage[]>();
  readonly #repositories: readonly ModelRepository[];
  #stopping = false;

  /** @throws Error for an `s3://` repository path that names no bucket. */
  constructor(options: ModelManagerOptions) {
    this.#options = options;
    this.#repositories = options.repositories.map(openRepository);
    this.#clock = options.clock ?? systemClock;
    if (options.onDemand && this.controlMode !== "explicit") {
      throw new Error("loading on demand (--load-on-demand) needs --model-control-mode=explicit");
    }
    if (options.memoryBudget && !options.onDemand) {
      throw new Error("--model-memory-budget needs --load-on-demand: an evicted model is loaded again when asked for");
    }
    this.#onDemand = options.onDemand
      ? new OnDemandLoads({
          ...options.onDemand,
          clock: this.#clock,
          inRepository: async (name) => (await this.#scan()).has(name),
          load: (name) => this.#loadOnDemand(name),
        })
      : undefined;
    this.#budget = options.memoryBudget
      ? new MemoryBudget(
          options.memoryBudget,
          BigInt(Math.round((options.minResidencySecs ?? 30) * 1e9)),
          {
            loaded: () => this.readyVersions(),
            evictable: (name) => {
              const entry = this.#models.get(name);
              return entry !== undefined && entry.loading === 0 && !entry.overridden;
            },
            evict: (name) => this.#evict(name),
            now: () => this.#clock.now(),
          },
          options.log,
        )
      : undefined;
    const checks = new LoadChecks({
      backends: options.backends,
      autoComplete: options.autoComplete,
      ...(options.gpus ? { gpus: options.gpus } : {}),
      ready: (name) => this.#models.get(name)?.versions.ready,
      loadComposing: (name, chain) => this.#loadFor(name, {}, chain),
    });
    this.#pipeline = new LoadPipeline({
      log: options.log,
      source: { scan: () => this.#scan(), configName: options.configName },
      checks,
      versions: new VersionLoader({
        ...options,
        now: () => this.#clock.now(),
        ...(this.#budget ? { admit: (name, version, load) => this.#admit(name, version, load) } : {}),
      }),
    });
  }

  /** The backends models load with, by name (`@galley/config`'s `GALLEY_BACKENDS` for a server). */
  get backends(): ReadonlySet<string> {
    return this.#options.backends.names();
  }

  get controlMode(): ControlMode {
    return this.#options.controlMode ?? "none";
  }

  /** Load what the control mode loads at startup. Resolves with the names that failed. */
  async start(): Promise<string[]> {
    const all = await this.#scan();
    const wanted = startupModels(this.controlMode, all.keys(), this.#options.startupModels);
    for (const name of all.keys()) this.#entry(name);
    await Promise.all(wanted.map((name) => this.load(name).catch(() => undefined)));
    return wanted.filter((name) => !this.#models.get(name)?.versions.ready.size);
  }

  /**
   * Load (or reload) a model and, for an ensemble, the composing models it needs. With overrides,
   * the config (and `file:` contents) replace what is on disk.
   *
   * @throws {@link InferenceError} as Triton answers a load request.
   */
  load(name: string, overrides: LoadOverrides = {}): Promise<void> {
    return this.#loadFor(name, overrides, []);
  }

  /** `chain` is the ensembles whose loads led here, outermost first, to find a cycle instead of waiting on it. */
  #loadFor(name: string, overrides: LoadOverrides, chain: readonly string[]): Promise<void> {
    try {
      if (this.#stopping) throw new InferenceError("LOAD_FAILED", { model: name, detail: "the server is stopping" });
      validateModelName(name);
    } catch (error) {
      return Promise.reject(error);
    }
    const entry = this.#entry(name);
    const loadedFor = chain.at(-1);
    if (loadedFor) {
      entry.loadedFor.add(loadedFor);
      if (entry.loading > 0) return entry.queue;
    }
    entry.loading++;
    const abort = new AbortController();
    entry.aborts.add(abort);
    const overridden = overrides.config !== undefined || (overrides.files?.size ?? 0) > 0;
    const run = entry.queue
      .then(() => this.#pipeline.run(entry, overrides, chain, abort.signal))
      .then(() => {
        // A model loaded from overrides could not be loaded again from disk: never evicted.
        entry.overridden = overridden;
      })
      .finally(() => {
        entry.loading--;
        entry.aborts.delete(abort);
      });
    entry.queue = run.catch(() => undefined);
    return run;
  }

  /** Unload every version of a model; with `unloadDependents`, also the models loaded for it. */
  unload(name: string, unloadDependents = false): Promise<void> {
    const entry = this.#models.get(name);
    if (!entry) return Promise.resolve();
    // Loads before this unload are no longer wanted: one stuck in `initialize` must not hold it.
    for (const abort of entry.aborts) abort.abort();
    const run = entry.queue.then(async () => {
      const composing = unloadDependents ? this.#composingOf(entry) : [];
      await this.#pipeline.unload(entry, "unloaded");
      await Promise.all(composing.map((c) => this.unload(c, true)));
    });
    entry.queue = run.catch(() => undefined);
    return run;
  }

  /** Rescan the repositories: load new and changed models, unload removed ones (poll mode). */
  async poll(): Promise<void> {
    await pollRepositories(await this.#scan(), this.#models, (name) => this.#entry(name), {
      load: (name) => this.load(name),
      unload: (name) => this.unload(name),
    });
  }

  /**
   * Unload everything (at shutdown), draining in-flight requests. Loads already running finish
   * (or fail) first and are then unloaded too; loads asked for from now on are refused.
   */
  async stop(): Promise<void> {
    this.stopLoading();
    await Promise.all([...this.#models.values()].map((entry) => entry.queue));
    await Promise.all([...this.#models.values()].map((entry) => this.#pipeline.unload(entry, "unloaded")));
  }

  /**
   * The first step of {@link stop}, on its own so a server can take it before it drains its
   * connections: a load request in flight then ends instead of holding its connection open.
   */
  stopLoading(): void {
    this.#stopping = true;
    for (const entry of this.#models.values()) for (const abort of entry.aborts) abort.abort();
  }

  /** True once {@link stop} has begun. */
  get stopping(): boolean {
    return this.#stopping;
  }

  /**
   * The version a request goes to: the given one, or the highest READY version.
   *
   * @throws {@link InferenceError} with Triton's messages (PROTOCOL.md §4.6).
   */
  resolve(name: string, version: string): LoadedModel {
    const entry = this.#models.get(name);
    if (!entry) throw new InferenceError("MODEL_NOT_FOUND", { model: name });
    return entry.versions.resolve(version);
  }

  /**
   * The version a request for inference runs on, as {@link resolve} finds it; with loading on
   * demand, a repository model with no READY version is loaded first (one load for every request
   * that asks meanwhile), and the promise settles once it is READY or the wait is over.
   *
   * @throws {@link InferenceError} as {@link resolve}, or why the load on demand failed.
   */
  acquire(name: string, version: string, wait: OnDemandWait = {}, requestId = ""): LoadedModel | Promise<LoadedModel> {
    try {
      return this.resolve(name, version);
    } catch (error) {
      const entry = this.#models.get(name);
      if (
        !this.#onDemand ||
        this.#stopping ||
        !(error instanceof InferenceError && NOT_LOADED.has(error.id)) ||
        (entry?.versions.ready.size ?? 0) > 0
      )
        throw error;
      return this.#onDemand.wait(name, error, wait, requestId).then(() => this.resolve(name, version));
    }
  }

  /** A request starts on `model`: busy until {@link release}, and the most recently used from now. */
  hold(model: LoadedModel): void {
    model.active++;
    model.lastUsedNs = this.#clock.now();
  }

  /** The request {@link hold} counted has finished. */
  release(model: LoadedModel): void {
    model.active--;
  }

  /** Loads on demand and evictions so far, by model. */
  get counters(): MemoryCounters {
    return {
      onDemandLoads: this.#onDemand?.counts ?? new Map(),
      waiting: this.#onDemand?.waiting ?? new Map(),
      evictions: this.#budget?.evictions ?? new Map(),
    };
  }

  /** The budget in force (`--model-memory-budget`), when there is one. */
  get memoryBudget(): MemoryBudgetLimits | undefined {
    return this.#budget?.limits;
  }

  /** Whether batches on a GPU wait for their working memory to fit (`--gpu-memory-admission`). */
  get gpuMemoryAdmission(): boolean {
    return this.#options.admission !== undefined;
  }

  /** A load on demand: the one load path, unless a load of the model is already queued or running. */
  #loadOnDemand(name: string): Promise<void> {
    const entry = this.#entry(name);
    if (entry.loading > 0) return entry.queue;
    if (entry.versions.ready.size > 0) return Promise.resolve();
    this.#options.log.info(`loading '${name}' on demand`);
    return this.load(name);
  }

  /** One version's load in the memory budget's turn, making room for what it took last time. */
  async #admit(name: string, version: number, load: () => Promise<LoadedModel>): Promise<LoadedModel> {
    const key = `${name}/${version}`;
    const budget = this.#budget as MemoryBudget;
    const loaded = await budget.admit(name, this.#lastMeasured.get(key) ?? [], load);
    this.#lastMeasured.set(key, loaded.memory);
    return loaded;
  }

  /**
   * Evict a model: its versions leave service now (requests that found them look again, and load
   * it again on demand), then unload once drained, UNAVAILABLE with {@link EVICTED_REASON}.
   */
  #evict(name: string): Promise<void> {
    const entry = this.#models.get(name);
    if (!entry) return Promise.resolve();
    for (const model of entry.versions.ready.values()) model.evicted = true;
    const run = this.#pipeline.unload(entry, EVICTED_REASON);
    entry.queue = entry.queue.then(() => run).catch(() => undefined);
    return run;
  }

  /** READY versions of one model (all models when `name` is empty), for statistics. */
  readyVersions(name = ""): LoadedModel[] {
    const entries = name === "" ? [...this.#models.values()] : [this.#models.get(name)].filter((e) => e !== undefined);
    return entries
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .flatMap((e) => [...e.versions.ready.values()].sort((a, b) => a.version - b.version));
  }

  /** The versions of a model and their states. */
  versionStates(name: string): ReadonlyMap<number, VersionStatus> | undefined {
    return this.#models.get(name)?.versions.states;
  }

  /**
   * The repository index: every model folder of every repository and every model loaded from
   * overrides, in name order; a model never loaded has only its name.
   */
  async index(readyOnly = false): Promise<IndexEntry[]> {
    const names = new Set([...(await this.#scan()).keys(), ...this.#models.keys()]);
    return [...names]
      .sort()
      .flatMap((name) => this.#models.get(name)?.versions.rows(readyOnly) ?? (readyOnly ? [] : [{ name }]));
  }

  /**
   * Readiness for `/v2/health/ready`: with strict readiness, every model Galley tried to load has
   * all its versions READY (versions unloaded on purpose do not count).
   */
  allModelsReady(): boolean {
    return [...this.#models.values()].every((entry) => entry.versions.allReady);
  }

  #composingOf(entry: ModelEntry): string[] {
    return [...this.#models.values()].filter((e) => e.loadedFor.has(entry.name)).map((e) => e.name);
  }

  #entry(name: string): ModelEntry {
    let entry = this.#models.get(name);
    if (!entry) {
      entry = modelEntry(name);
      this.#models.set(name, entry);
    }
    return entry;
  }

  #scan(): Promise<Map<string, ModelRepository[]>> {
    return scanRepositories(this.#repositories);
  }
}
