import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import {
  type CheckOptions,
  checkModel,
  checkRepository,
  fromModelConfigJson,
  type ModelCheck,
  type ModelSource,
  Platform,
  readModelSource,
} from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { BackendRegistry } from "../backend/registry.js";
import { InferenceError } from "../core/errors.js";
import { ModelStatistics } from "../core/statistics.js";
import type { Logger } from "../log.js";
import { DefaultScheduler } from "../scheduler/default-scheduler.js";
import { DynamicBatcher } from "../scheduler/dynamic-batcher.js";
import { type ComposingInfer, EnsembleScheduler } from "../scheduler/ensemble-scheduler.js";
import { type RateLimiter, rateLimited } from "../scheduler/rate-limiter.js";
import { SequenceBatcher } from "../scheduler/sequence-batcher.js";
import { configOverrideProblem } from "./config-override-problem.js";
import { removeFileOverrides, writeFileOverrides } from "./file-overrides.js";
import { loadInitialStates } from "./initial-state.js";
import { LoadedModel } from "./loaded-model.js";
import { checkConfigFiles, readModelFile } from "./model-file.js";
import { validateModelName } from "./model-name.js";
import { warmUp } from "./warmup.js";

/** Triton's model states, as the repository index reports them. */
export type ModelState = "UNKNOWN" | "READY" | "UNAVAILABLE" | "LOADING" | "UNLOADING";

/** `--model-control-mode`. */
export type ControlMode = "none" | "poll" | "explicit";

/** One row of the repository index. */
export interface IndexEntry {
  name: string;
  version?: string;
  state?: ModelState;
  reason?: string;
}

/** A load request's overrides: a JSON config and `file:` contents. */
export interface LoadOverrides {
  config?: string;
  files?: ReadonlyMap<string, Uint8Array>;
}

/** Options for {@link ModelManager}; defaults are tritonserver's. */
export interface ModelManagerOptions {
  repositories: readonly string[];
  backends: BackendRegistry;
  log: Logger;
  controlMode?: ControlMode;
  /** `--load-model` (explicit mode); `*` loads everything. */
  startupModels?: readonly string[];
  /** `--disable-auto-complete-config` turns this off. */
  autoComplete?: boolean;
  /** `--model-load-thread-count` (default 4). */
  loadThreads?: number;
  /** `--model-config-name`. */
  configName?: string;
  /** How an ensemble runs its steps: the server's own inference path. */
  infer?: ComposingInfer;
  /** `--rate-limit execution_count`: instances execute only with their resources. */
  rateLimiter?: RateLimiter;
}

/** A version's state and, when not READY, why. */
export interface VersionStatus {
  state: ModelState;
  reason: string;
}

interface ModelEntry {
  name: string;
  /** Every version Galley has tried, with its state. */
  versions: Map<number, VersionStatus>;
  /** READY versions, by number; requests are routed here. */
  ready: Map<number, LoadedModel>;
  fingerprint?: string;
  /** A temporary folder holding `file:` overrides, removed on unload. */
  overrideFolder?: string;
  /** One per load queued or running, aborted by an unload or by shutdown so a stuck load cannot hold them. */
  aborts: Set<AbortController>;
  /** Models this one was loaded for (an ensemble's composing models), for `unload_dependents`. */
  loadedFor: Set<string>;
  /** Serialises loads and unloads of this model. */
  queue: Promise<void>;
  /** Loads queued or running: an ensemble that needs the model waits for them instead of reloading it. */
  loading: number;
}

/**
 * The model repository manager: finds models in the repositories, loads and unloads them as the
 * control mode allows, keeps the index with states and reasons, and routes requests to READY
 * versions. A reload keeps the old versions serving until the new ones are ready; a model that
 * fails to load never takes the server down.
 */
export class ModelManager {
  readonly #options: ModelManagerOptions;
  readonly #models = new Map<string, ModelEntry>();
  readonly #log: Logger;
  #loadSlots: number;
  readonly #slotWaiters: (() => void)[] = [];
  /** A cycle found below an ensemble's load, by the ensemble it closes on, to fail that one with the same text. */
  readonly #cycles = new Map<string, string>();
  #stopping = false;

  constructor(options: ModelManagerOptions) {
    this.#options = options;
    this.#log = options.log;
    this.#loadSlots = Math.max(1, options.loadThreads ?? 4);
  }

  get controlMode(): ControlMode {
    return this.#options.controlMode ?? "none";
  }

  /** Load what the control mode loads at startup. Resolves with the names that failed. */
  async start(): Promise<string[]> {
    const all = await this.#scan();
    const wanted =
      this.controlMode === "explicit"
        ? (this.#options.startupModels ?? []).includes("*")
          ? [...all.keys()]
          : [...(this.#options.startupModels ?? [])]
        : [...all.keys()];
    for (const name of all.keys()) this.#entry(name);
    await Promise.all(wanted.map((name) => this.load(name).catch(() => undefined)));
    return wanted.filter((name) => !this.#models.get(name)?.ready.size);
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
    const run = entry.queue
      .then(() => this.#load(entry, overrides, chain, abort.signal))
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
      await this.#unloadAll(entry, "unloaded");
      await Promise.all(composing.map((c) => this.unload(c, true)));
    });
    entry.queue = run.catch(() => undefined);
    return run;
  }

  /** Rescan the repositories: load new and changed models, unload removed ones (poll mode). */
  async poll(): Promise<void> {
    const found = await this.#scan();
    const work: Promise<unknown>[] = [];
    for (const [name, paths] of found) {
      const entry = this.#entry(name);
      if (entry.overrideFolder) continue;
      const fingerprint = paths.length === 1 && paths[0] ? await fingerprintOf(paths[0]) : "duplicate";
      if (fingerprint !== entry.fingerprint) work.push(this.load(name).catch(() => undefined));
    }
    for (const [name, entry] of this.#models) {
      if (!found.has(name) && !entry.overrideFolder && entry.ready.size > 0) work.push(this.unload(name));
    }
    await Promise.all(work);
  }

  /**
   * Unload everything (at shutdown), draining in-flight requests. Loads already running finish
   * (or fail) first and are then unloaded too; loads asked for from now on are refused.
   */
  async stop(): Promise<void> {
    this.stopLoading();
    await Promise.all([...this.#models.values()].map((entry) => entry.queue));
    await Promise.all([...this.#models.values()].map((entry) => this.#unloadAll(entry, "unloaded")));
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
    if (!entry || entry.versions.size === 0) throw new InferenceError("MODEL_NOT_FOUND", { model: name });
    if (version === "") {
      const highest = [...entry.ready.keys()].sort((a, b) => b - a)[0];
      if (highest === undefined) throw new InferenceError("MODEL_NO_VERSIONS", { model: name });
      return entry.ready.get(highest) as LoadedModel;
    }
    if (!/^\d+$/.test(version) || Number(version) <= 0) {
      throw new InferenceError("BAD_VERSION", { version });
    }
    const number = Number(version);
    const loaded = entry.ready.get(number);
    if (loaded) return loaded;
    if (entry.versions.has(number)) throw new InferenceError("MODEL_VERSION_NOT_READY", { model: name, version });
    throw new InferenceError("MODEL_VERSION_NOT_FOUND", { model: name, version });
  }

  /** READY versions of one model (all models when `name` is empty), for statistics. */
  readyVersions(name = ""): LoadedModel[] {
    const entries = name === "" ? [...this.#models.values()] : [this.#models.get(name)].filter((e) => e !== undefined);
    return entries
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .flatMap((e) => [...e.ready.values()].sort((a, b) => a.version - b.version));
  }

  /** The versions of a model and their states. */
  versionStates(name: string): ReadonlyMap<number, VersionStatus> | undefined {
    return this.#models.get(name)?.versions;
  }

  /**
   * The repository index: every model folder of every repository and every model loaded from
   * overrides, in name order; a model never loaded has only its name.
   */
  async index(readyOnly = false): Promise<IndexEntry[]> {
    const names = new Set([...(await this.#scan()).keys(), ...this.#models.keys()]);
    const rows: IndexEntry[] = [];
    for (const name of [...names].sort()) {
      const entry = this.#models.get(name);
      if (!entry || entry.versions.size === 0) {
        if (!readyOnly) rows.push({ name });
        continue;
      }
      for (const [version, status] of [...entry.versions].sort((a, b) => a[0] - b[0])) {
        if (readyOnly && status.state !== "READY") continue;
        rows.push({
          name,
          version: String(version),
          state: status.state,
          ...(status.reason ? { reason: status.reason } : {}),
        });
      }
    }
    return rows;
  }

  /**
   * Readiness for `/v2/health/ready`: with strict readiness, every model Galley tried to load has
   * all its versions READY (versions unloaded on purpose do not count).
   */
  allModelsReady(): boolean {
    for (const entry of this.#models.values()) {
      for (const status of entry.versions.values()) {
        if (status.state !== "READY" && status.reason !== "unloaded") return false;
      }
    }
    return true;
  }

  async #load(
    entry: ModelEntry,
    overrides: LoadOverrides,
    chain: readonly string[],
    signal: AbortSignal,
  ): Promise<void> {
    if (signal.aborted)
      throw new InferenceError("LOAD_FAILED", { model: entry.name, detail: "the load was cancelled" });
    const started = process.hrtime.bigint();
    let source: ModelSource;
    try {
      source = await this.#source(entry, overrides);
    } catch (error) {
      if (error instanceof InferenceError && error.id !== "POLL_FAILED") throw error;
      throw new InferenceError("POLL_FAILED", { model: entry.name }, { cause: error });
    }
    // A folder of `file:` overrides belongs to the model only once it serves; until then a failure removes it.
    const written = overrides.files && overrides.files.size > 0 ? source.path : undefined;
    try {
      await this.#loadSource(entry, source, written, chain, started, signal);
    } catch (error) {
      if (written && entry.overrideFolder !== written) await removeFileOverrides(written);
      throw error;
    }
  }

  async #loadSource(
    entry: ModelEntry,
    source: ModelSource,
    written: string | undefined,
    chain: readonly string[],
    started: bigint,
    signal: AbortSignal,
  ): Promise<void> {
    // Polling retries a failed model only when its files change, as Triton does.
    const fingerprint = source.path && !entry.overrideFolder ? await fingerprintOf(source.path) : undefined;
    const check = await this.#check(source, entry, chain);
    if (check.diagnostics.length > 0 || !check.config) {
      entry.fingerprint = fingerprint;
      const message = check.diagnostics[0]?.message ?? "invalid model configuration";
      this.#log.error(`Poll failed for model directory '${entry.name}': ${message}`);
      const failed = new Map(entry.versions);
      for (const version of source.versions.length > 0 ? source.versions : [1]) {
        if (!entry.ready.has(version)) failed.set(version, { state: "UNAVAILABLE", reason: message });
      }
      if (entry.ready.size === 0) entry.versions = failed;
      // Triton finds cycles in its dependency graph, after polling, and answers as for a failed load.
      if (check.diagnostics[0]?.path === "dependency") {
        throw new InferenceError("LOAD_FAILED_REASON", { model: entry.name, detail: message });
      }
      throw new InferenceError("LOAD_FAILED", {
        model: entry.name,
        detail: `failed to poll from model repository: ${message}`,
      });
    }
    const config = check.config;

    // Versions load in parallel while the old ones keep serving; then the set is swapped.
    const loaded = new Map<number, LoadedModel>();
    const errors: string[] = [];
    for (const version of check.versions) entry.versions.set(version, { state: "LOADING", reason: "" });
    await Promise.all(
      check.versions.map(async (version) => {
        try {
          loaded.set(version, await this.#loadVersion(entry.name, version, config, source.path ?? "", signal));
          entry.versions.set(version, { state: "READY", reason: "" });
        } catch (error) {
          const reason = `${(error as Error).message}`;
          entry.versions.set(version, { state: "UNAVAILABLE", reason });
          errors.push(`version ${version} is at UNAVAILABLE state: Invalid argument: ${reason};`);
        }
      }),
    );
    if (errors.length > 0) {
      entry.fingerprint = fingerprint;
      await Promise.all([...loaded.values()].map((m) => m.unload()));
      // A failed reload keeps the versions that were serving.
      for (const version of entry.ready.keys()) entry.versions.set(version, { state: "READY", reason: "" });
      this.#log.error(`failed to load '${entry.name}': ${errors.join(" ")}`);
      throw new InferenceError("LOAD_FAILED_REASON", { model: entry.name, detail: errors.join(" ") });
    }
    const previous = entry.ready;
    entry.ready = loaded;
    entry.fingerprint = fingerprint;
    if (entry.overrideFolder && entry.overrideFolder !== source.path) await removeFileOverrides(entry.overrideFolder);
    entry.overrideFolder = written;
    for (const [version, old] of previous) {
      if (!loaded.has(version)) entry.versions.set(version, { state: "UNLOADING", reason: "" });
      await old.unload();
      if (!loaded.has(version)) entry.versions.set(version, { state: "UNAVAILABLE", reason: "unloaded" });
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    for (const model of loaded.values()) model.stats.loadSeconds = seconds;
    this.#log.info(
      `successfully loaded '${entry.name}' version ${check.versions.join(", ")} in ${seconds.toFixed(3)} s`,
    );
  }

  async #source(entry: ModelEntry, overrides: LoadOverrides): Promise<ModelSource> {
    if (overrides.files && overrides.files.size > 0 && overrides.config === undefined) {
      throw new InferenceError("FILE_OVERRIDE_NEEDS_CONFIG", { model: entry.name });
    }
    let config: ModelConfig | undefined;
    if (overrides.config !== undefined) {
      try {
        config = fromModelConfigJson(overrides.config);
      } catch (error) {
        throw new InferenceError("LOAD_FAILED", {
          model: entry.name,
          detail: `Invalid config override: ${configOverrideProblem(overrides.config, error)}`,
        });
      }
    }
    if (overrides.files && overrides.files.size > 0) {
      const folder = await writeFileOverrides(entry.name, overrides.files);
      const source = await readModelSource(folder);
      return { ...source, ...(config ? { config } : {}) };
    }
    const paths = (await this.#scan()).get(entry.name) ?? [];
    if (paths.length === 0) throw new Error(`no model folder named '${entry.name}' in the model repositories`);
    if (paths.length > 1) throw new Error(`model '${entry.name}' appears in more than one repository`);
    const source = await readModelSource(
      paths[0] as string,
      this.#options.configName ? { configName: this.#options.configName } : {},
    );
    return config ? { ...source, config } : source;
  }

  /** Run Triton's load checks; for an ensemble, load its composing models first and check against them. */
  async #check(source: ModelSource, entry: ModelEntry, chain: readonly string[]): Promise<ModelCheck> {
    const refused = source.config ? fileProblem(source.config) : undefined;
    if (refused) return { name: entry.name, versions: [], diagnostics: [{ path: "config", message: refused }] };
    const check = await this.#checkConfig(source, entry, chain);
    const problem = check.config ? fileProblem(check.config) : undefined;
    return problem ? { ...check, diagnostics: [{ path: "config", message: problem }] } : check;
  }

  async #checkConfig(source: ModelSource, entry: ModelEntry, chain: readonly string[]): Promise<ModelCheck> {
    const backends = this.#options.backends;
    const options: CheckOptions = {
      autoComplete: this.#options.autoComplete ?? true,
      backends: backends.names(),
      backendAutoComplete: (s, config, version) =>
        backends.get(config.backend)?.autoComplete?.(config, s.path ?? "", version),
    };
    const own = await checkModel(source, options);
    if (own.diagnostics.length > 0 || own.config?.platform !== Platform.ensemble) {
      return (await checkRepository([source], options)).get(entry.name) ?? own;
    }
    // An ensemble loads its composing models first, then is checked against their final configs.
    const steps =
      own.config.schedulingChoice.case === "ensembleScheduling" ? own.config.schedulingChoice.value.step : [];
    const composing = [...new Set(steps.map((s) => s.modelName))].filter((n) => n !== entry.name);
    // A composing model already being loaded by an outer ensemble of this chain is a cycle: waiting
    // for it would wait for ourselves.
    const path = [...chain, entry.name];
    for (const name of composing) {
      const at = path.indexOf(name);
      if (at < 0) continue;
      const cycle = path.slice(at);
      const message = `circular dependency between ensembles: ${cycle[0]} -> ... -> ${cycle.at(-1)} -> ${cycle[0]}`;
      this.#cycles.set(name, message);
      return { name: entry.name, versions: [], diagnostics: [{ path: "dependency", message }] };
    }
    await Promise.all(
      composing.map((n) =>
        this.#models.get(n)?.ready.size ? undefined : this.#loadFor(n, {}, path).catch(() => undefined),
      ),
    );
    const cycle = this.#cycles.get(entry.name);
    if (cycle) {
      this.#cycles.delete(entry.name);
      return { name: entry.name, versions: [], diagnostics: [{ path: "dependency", message: cycle }] };
    }
    const loadedSources: ModelSource[] = composing.flatMap((n) => {
      const ready = this.#models.get(n)?.ready;
      const first = ready ? [...ready.values()][0] : undefined;
      return first ? [{ name: n, config: first.config, versions: [...(ready?.keys() ?? [])] }] : [];
    });
    const checks = await checkRepository([source, ...loadedSources], options);
    return checks.get(entry.name) ?? own;
  }

  async #loadVersion(
    name: string,
    version: number,
    config: ModelConfig,
    modelPath: string,
    signal: AbortSignal,
  ): Promise<LoadedModel> {
    await this.#acquireSlot();
    try {
      if (config.platform === Platform.ensemble) {
        const infer = this.#options.infer;
        if (!infer)
          throw new Error("this server cannot run ensembles (no inference path was given to the model manager)");
        const stats = new ModelStatistics();
        const nothing = { instances: [], unload: async () => {} };
        return new LoadedModel(name, version, config, nothing, new EnsembleScheduler(config, infer), new Map(), stats);
      }
      const backend = this.#options.backends.get(config.backend);
      if (!backend) {
        throw new Error(
          `unable to find backend library for backend '${config.backend}', try specifying runtime on the model configuration.`,
        );
      }
      const labels = await readLabels(config, modelPath);
      const initialStates = await loadInitialStates(config, modelPath);
      const model = await backend.load({
        config,
        version,
        modelPath,
        versionPath: join(modelPath, String(version)),
        signal,
        log: this.#log,
      });
      const limiter = this.#options.rateLimiter;
      const instances = limiter ? model.instances.map((i) => rateLimited(i, limiter, i.rateLimiter)) : model.instances;
      try {
        await warmUp(config, model.instances, modelPath);
      } catch (error) {
        await model.unload();
        throw error;
      }
      const stats = new ModelStatistics();
      const scheduler =
        config.schedulingChoice.case === "dynamicBatching"
          ? new DynamicBatcher({ instances, config, stats, log: this.#log })
          : config.schedulingChoice.case === "sequenceBatching"
            ? new SequenceBatcher({ instances, config, stats, log: this.#log, initialStates })
            : new DefaultScheduler(instances, stats);
      return new LoadedModel(name, version, config, model, scheduler, labels, stats);
    } finally {
      this.#releaseSlot();
    }
  }

  async #unloadAll(entry: ModelEntry, reason: string): Promise<void> {
    const ready = entry.ready;
    entry.ready = new Map();
    for (const version of ready.keys()) entry.versions.set(version, { state: "UNLOADING", reason: "" });
    await Promise.all([...ready.values()].map((m) => m.unload()));
    for (const version of entry.versions.keys()) entry.versions.set(version, { state: "UNAVAILABLE", reason });
    entry.fingerprint = undefined;
    if (entry.overrideFolder) {
      await removeFileOverrides(entry.overrideFolder);
      entry.overrideFolder = undefined;
    }
    if (ready.size > 0) this.#log.info(`successfully unloaded '${entry.name}'`);
  }

  #composingOf(entry: ModelEntry): string[] {
    return [...this.#models.values()].filter((e) => e.loadedFor.has(entry.name)).map((e) => e.name);
  }

  #entry(name: string): ModelEntry {
    let entry = this.#models.get(name);
    if (!entry) {
      entry = {
        name,
        versions: new Map(),
        ready: new Map(),
        loadedFor: new Set(),
        aborts: new Set(),
        queue: Promise.resolve(),
        loading: 0,
      };
      this.#models.set(name, entry);
    }
    return entry;
  }

  /** Model folders by name across every repository (a name in two repositories has two paths). */
  async #scan(): Promise<Map<string, string[]>> {
    const found = new Map<string, string[]>();
    for (const repository of this.#options.repositories) {
      const entries = await readdir(repository, { withFileTypes: true }).catch(() => []);
      for (const e of entries) {
        if (!e.isDirectory()) continue;
        found.set(e.name, [...(found.get(e.name) ?? []), join(repository, e.name)]);
      }
    }
    return found;
  }

  async #acquireSlot(): Promise<void> {
    if (this.#loadSlots > 0) {
      this.#loadSlots--;
      return;
    }
    await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
  }

  #releaseSlot(): void {
    const next = this.#slotWaiters.shift();
    if (next) next();
    else this.#loadSlots++;
  }
}

/** Why a config's file names are refused, if they are (see {@link checkConfigFiles}). */
function fileProblem(config: ModelConfig): string | undefined {
  try {
    checkConfigFiles(config);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/** Labels for outputs that name a `label_filename` (one label per line). */
async function readLabels(config: ModelConfig, modelPath: string): Promise<Map<string, string[]>> {
  const labels = new Map<string, string[]>();
  for (const output of config.output) {
    if (output.labelFilename === "") continue;
    const text = (await readModelFile(modelPath, "", output.labelFilename, "label_filename")).toString("utf8");
    labels.set(
      output.name,
      text.split(/\r?\n/).filter((line, i, all) => line !== "" || i < all.length - 1),
    );
  }
  return labels;
}

/** What changes when a model changes on disk: every file's path, size and modification time. */
async function fingerprintOf(folder: string): Promise<string> {
  const hash = createHash("sha256");
  const walk = async (dir: string, depth: number): Promise<void> => {
    const entries = (await readdir(dir, { withFileTypes: true }).catch(() => [])).sort((a, b) =>
      a.name < b.name ? -1 : 1,
    );
    for (const e of entries) {
      const path = join(dir, e.name);
      if (e.isDirectory()) {
        if (depth < 4) await walk(path, depth + 1);
        continue;
      }
      const info = await stat(path).catch(() => undefined);
      hash.update(`${path}\0${info?.size}\0${info?.mtimeMs}\n`);
    }
  };
  await walk(folder, 0);
  return hash.digest("hex");
}
