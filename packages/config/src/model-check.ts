import { clone, create } from "@bufbuild/protobuf";
import {
  type ModelConfig,
  ModelConfigSchema,
  type ModelInstanceGroup_Kind,
  ModelTransactionPolicySchema,
} from "@galley/proto";
import type { Diagnostic } from "./diagnostic.js";
import type { AutoCompleteResult } from "./onnx-auto-complete.js";
import { autofillBackendFields, type VersionEntry } from "./rules/autofill.js";
import { validateEnsembleConfig } from "./rules/ensemble-config.js";
import { normalizeInstanceGroups, normalizeModelConfig } from "./rules/normalize.js";
import { Platform } from "./rules/platforms.js";
import { validateInstanceGroups } from "./rules/validate-instance-groups.js";
import { validateModelIOConfig } from "./rules/validate-io.js";
import { validateModelConfig } from "./rules/validate-model-config.js";
import { ConfigParseError, parseModelConfig } from "./text-format.js";

/** One model folder, as read from a repository (see `readModelSource`). */
export interface ModelSource {
  /** The folder name, which is the model name. */
  name: string;
  /** Where the folder is, for messages; defaults to the name. */
  path?: string;
  /** `config.pbtxt` text; undefined when the folder has none. */
  configText?: string;
  /** Where `configText` came from, for messages (`<model>/configs/<name>.pbtxt`); `<path>/config.pbtxt` by default. */
  configFile?: string;
  /** A config given directly (a load request's JSON override); wins over `configText`. */
  config?: ModelConfig;
  /** Numeric version folders present. */
  versions: readonly number[];
  /** Entries of the lexicographically first version folder, for backend autofill. */
  firstVersionEntries?: readonly VersionEntry[];
}

/** How models are checked; the defaults are tritonserver's. */
export interface CheckOptions {
  /** Auto-complete (default true); false is `--disable-auto-complete-config` (strict). */
  autoComplete?: boolean;
  /** GPU ids the server can use; none by default. */
  gpus?: readonly number[];
  /** Backends the server has (a set of names, or anything that answers `has`); undefined accepts any backend name. */
  backends?: Pick<ReadonlySet<string>, "has">;
  /**
   * Why the backend a model names cannot load models here, its optional library being absent
   * (`onnxruntime-node`, libtorch, python3 with numpy); undefined when it can. Not asked for a
   * model that names a `runtime` library, other than a Python-based backend's `model.py` (asked
   * with that config). Default: every backend can.
   */
  missingLibrary?: (backend: string, config: ModelConfig) => string | undefined | Promise<string | undefined>;
  /**
   * The backends that have a Python-based runtime (Triton's `backends/<name>/model.py`), which
   * `runtime: "model.py"` picks; undefined: any backend the server has (see `backends`).
   */
  pythonBasedBackends?: Pick<ReadonlySet<string>, "has">;
  /** Whether a `runtime` library named by a config exists for the model; default: it does not. */
  runtimeExists?: (source: ModelSource, runtime: string) => boolean;
  /**
   * The backend's own auto-complete (ONNX Runtime reads the model file of `version`, the newest
   * version selected); skipped when undefined or when it returns undefined.
   */
  backendAutoComplete?: (
    source: ModelSource,
    config: ModelConfig,
    version: number,
  ) => AutoCompleteResult | undefined | Promise<AutoCompleteResult | undefined>;
  /** The backend's preferred instance groups (ONNX Runtime has none). */
  preferredGroups?: (backend: string) => readonly { kind: ModelInstanceGroup_Kind; count: number; gpus?: number[] }[];
}

/** The `runtime` that names a backend's Python-based runtime (Triton's `backends/<backend>/model.py`). */
export const PYTHON_BASED_RUNTIME = "model.py";

/** The verdict on one model: its final config, the versions that would load, and any problems. */
export interface ModelCheck {
  name: string;
  /** The config after autofill, auto-complete and normalisation (as Triton reports it), when it could be read. */
  config?: ModelConfig;
  /** Versions the version policy selects. */
  versions: number[];
  /** Empty when the model would load. The first is what Triton reports. */
  diagnostics: Diagnostic[];
}

/**
 * Load one model's configuration as Triton does (PROTOCOL.md §4): read, autofill backend fields,
 * normalise, validate, apply the version policy, resolve the backend, normalise and validate
 * instance groups, run the backend's auto-complete, and validate again. Stops at the first stage
 * that fails, as Triton does. Ensembles' dependencies are checked by {@link checkRepository}.
 */
export async function checkModel(source: ModelSource, options: CheckOptions = {}): Promise<ModelCheck> {
  const autoComplete = options.autoComplete ?? true;
  const fail = (diagnostics: Diagnostic[], config?: ModelConfig): ModelCheck => ({
    name: source.name,
    ...(config ? { config } : {}),
    versions: [],
    diagnostics,
  });
  const where = source.configFile ?? `${source.path ?? source.name}/config.pbtxt`;

  let config: ModelConfig;
  if (source.config) config = clone(ModelConfigSchema, source.config);
  else if (source.configText !== undefined) {
    try {
      config = parseModelConfig(source.configText, where);
    } catch (error) {
      const detail = error instanceof ConfigParseError ? `: ${error.line}:${error.column}: ${error.reason}` : "";
      return fail([{ path: "", message: `failed to read text proto from ${where}${detail}` }]);
    }
  } else if (autoComplete) config = create(ModelConfigSchema);
  else return fail([{ path: "", message: `failed to read text proto from ${where}` }]);

  const autofill = autofillBackendFields(config, source.name, source.firstVersionEntries);
  if (autofill.length > 0) return fail(autofill, config);
  normalizeModelConfig(config);
  const invalid = validateModelConfig(config);
  if (invalid.length > 0) return fail(invalid, config);
  if (!autoComplete) {
    const io = validateModelIOConfig(config);
    if (io.length > 0) return fail(io, config);
  }
  if (config.name !== source.name) {
    return fail(
      [
        {
          path: "name",
          message: `unexpected directory name '${source.name}' for model '${config.name}', directory name must equal model name`,
        },
      ],
      config,
    );
  }
  const versions = versionsToLoad(config, source.versions);
  if (versions.length === 0) {
    return fail(
      [
        {
          path: "version_policy",
          message: `at least one version must be available under the version policy of model '${config.name}'`,
        },
      ],
      config,
    );
  }
  if (config.platform === Platform.ensemble) return { name: source.name, config, versions, diagnostics: [] };

  const backend = checkBackend(source, config, options);
  if (backend.length > 0) return fail(backend, config);
  const missing =
    config.runtime === "" || config.runtime === PYTHON_BASED_RUNTIME
      ? await options.missingLibrary?.(config.backend, config)
      : undefined;
  if (missing !== undefined) {
    // The server's own text when such a load fails (`unable to load model 'm', <why>`).
    return fail([{ path: "backend", message: `unable to load model '${config.name}', ${missing}` }], config);
  }
  normalizeInstanceGroups(config, {
    gpus: options.gpus ?? [],
    preferredGroups: options.preferredGroups?.(config.backend) ?? [],
  });
  const groups = validateInstanceGroups(config, { gpus: options.gpus ?? [] });
  if (groups.length > 0) return fail(groups, config);

  if (autoComplete && options.backendAutoComplete) {
    const completed = await options.backendAutoComplete(source, clone(ModelConfigSchema, config), versions.at(-1) ?? 0);
    if (completed) {
      if (completed.diagnostics.length > 0) return fail(completed.diagnostics, config);
      const merged = mergeAutoComplete(config, completed.config);
      if (merged) return fail([merged], config);
      normalizeModelConfig(config);
    }
  }
  const final = [...validateModelConfig(config), ...validateModelIOConfig(config)];
  if (final.length > 0) return fail(final, config);
  return { name: source.name, config, versions, diagnostics: [] };
}

/**
 * Check a whole repository: every model with {@link checkModel}, then each ensemble's composing
 * models (present, not circular, valid, required versions loaded) and the ensemble against their
 * final configs. An ensemble's `model_transaction_policy.decoupled` is set from its steps, as in
 * Triton.
 */
export async function checkRepository(
  sources: readonly ModelSource[],
  options: CheckOptions = {},
): Promise<Map<string, ModelCheck>> {
  const checks = new Map<string, ModelCheck>();
  const counts = new Map<string, number>();
  for (const source of sources) counts.set(source.name, (counts.get(source.name) ?? 0) + 1);
  const unique = sources.filter((source) => counts.get(source.name) === 1);
  for (const check of await Promise.all(unique.map((source) => checkModel(source, options)))) {
    checks.set(check.name, check);
  }

  const steps = (check: ModelCheck) =>
    check.config?.schedulingChoice.case === "ensembleScheduling" ? check.config.schedulingChoice.value.step : [];
  const ensembles = [...checks.values()].filter(
    (c) => c.diagnostics.length === 0 && c.config?.platform === Platform.ensemble,
  );

  for (const ensemble of ensembles) {
    const missing = steps(ensemble).find((s) => !checks.has(s.modelName));
    if (missing) {
      ensemble.diagnostics.push({
        path: "ensemble_scheduling",
        message: `ensemble ${ensemble.name} contains models that are not available or ambiguous: ${missing.modelName}`,
      });
    }
  }
  for (const ensemble of ensembles) {
    if (ensemble.diagnostics.length > 0) continue;
    const cycle = findCycle(ensemble.name, (name) => {
      const check = checks.get(name);
      return check ? steps(check).map((s) => s.modelName) : [];
    });
    if (cycle) {
      const message = `circular dependency between ensembles: ${cycle[0]} -> ... -> ${cycle[cycle.length - 1]} -> ${cycle[0]}`;
      for (const name of cycle) {
        const check = checks.get(name);
        if (check && check.diagnostics.length === 0) check.diagnostics.push({ path: "ensemble_scheduling", message });
      }
    }
  }

  const done = new Set<string>();
  const visit = (ensemble: ModelCheck): void => {
    if (done.has(ensemble.name)) return;
    done.add(ensemble.name);
    if (ensemble.diagnostics.length > 0 || !ensemble.config) return;
    const composing = new Map<string, ModelConfig>();
    for (const step of steps(ensemble)) {
      const upstream = checks.get(step.modelName);
      if (!upstream) return;
      if (upstream.config?.platform === Platform.ensemble) visit(upstream);
      const problem = dependencyProblem(ensemble.name, upstream, step.modelVersion);
      if (problem) {
        ensemble.diagnostics.push({ path: "ensemble_scheduling", message: problem });
        return;
      }
      if (upstream.config) composing.set(step.modelName, upstream.config);
    }
    const scheduling = ensemble.config.schedulingChoice;
    if (scheduling.case !== "ensembleScheduling") return;
    const result = validateEnsembleConfig(ensemble.config, scheduling.value, composing);
    ensemble.config.modelTransactionPolicy = create(ModelTransactionPolicySchema, { decoupled: result.decoupled });
    ensemble.diagnostics.push(...result.diagnostics);
  };
  for (const ensemble of ensembles) visit(ensemble);
  return checks;
}

function dependencyProblem(ensemble: string, upstream: ModelCheck, version: bigint): string | undefined {
  const u = upstream.name;
  if (upstream.diagnostics.length > 0) {
    return `ensemble '${ensemble}' depends on '${u}' which is not valid. Model '${u}' failed with error: ${upstream.diagnostics[0]?.message}`;
  }
  if (upstream.versions.length === 0) return `ensemble '${ensemble}' depends on '${u}' which has no loaded version.`;
  if (version !== -1n && !upstream.versions.includes(Number(version))) {
    return `ensemble '${ensemble}' depends on '${u}' whose required version ${version} is not loaded.`;
  }
  return undefined;
}

/** A cycle through `start` in the dependency graph, as the list of models on it (start first). */
function findCycle(start: string, next: (name: string) => string[]): string[] | undefined {
  const path: string[] = [];
  const onPath = new Set<string>();
  const finished = new Set<string>();
  const walk = (name: string): string[] | undefined => {
    path.push(name);
    onPath.add(name);
    for (const dep of next(name)) {
      if (dep === start) return [...path];
      if (onPath.has(dep) || finished.has(dep)) continue;
      const found = walk(dep);
      if (found) return found;
    }
    path.pop();
    onPath.delete(name);
    finished.add(name);
    return undefined;
  };
  return walk(start);
}

/** The versions a config's version policy selects from those present. */
export function versionsToLoad(config: ModelConfig, present: readonly number[]): number[] {
  const sorted = [...new Set(present)].sort((a, b) => a - b);
  const policy = config.versionPolicy?.policyChoice;
  switch (policy?.case) {
    case "all":
      return sorted;
    case "specific": {
      const wanted = new Set(policy.value.versions.map(Number));
      return sorted.filter((v) => wanted.has(v));
    }
    default: {
      const n = policy?.case === "latest" ? policy.value.numVersions : 1;
      return sorted.slice(Math.max(0, sorted.length - n));
    }
  }
}

function checkBackend(source: ModelSource, config: ModelConfig, options: CheckOptions): Diagnostic[] {
  const name = config.name;
  if (config.backend === "") return [{ path: "backend", message: `must specify 'backend' for '${name}'` }];
  if (config.runtime === PYTHON_BASED_RUNTIME) {
    // Triton: the Python backend runs `<backend directory>/<backend>/model.py`.
    const based = options.pythonBasedBackends ?? options.backends;
    if (based && !based.has(config.backend)) {
      return [
        {
          path: "runtime",
          message: `unable to find Python backend based backend library '${PYTHON_BASED_RUNTIME}' for model '${name}', searched: '${config.backend}/${PYTHON_BASED_RUNTIME}'`,
        },
      ];
    }
    return [];
  }
  if (config.runtime !== "") {
    const runtime = config.runtime;
    const directory = source.path ?? source.name;
    if (runtime.includes("/") || runtime.includes("\\") || runtime === ".." || runtime === ".") {
      return [
        {
          path: "runtime",
          message: `backend library name '${runtime}' escapes backend directory '${directory}', for model '${name}', check model config runtime field`,
        },
      ];
    }
    if (!(options.runtimeExists?.(source, runtime) ?? false)) {
      const searched = [...source.versions.map((v) => `${directory}/${v}`), directory].map((p) => `'${p}' `).join("");
      return [
        {
          path: "runtime",
          message: `unable to find backend library '${runtime}' for model '${name}', searched: ${searched}`,
        },
      ];
    }
    return [];
  }
  if (options.backends && !options.backends.has(config.backend)) {
    return [
      {
        path: "backend",
        message: `unable to find backend library for backend '${config.backend}', try specifying runtime on the model configuration.`,
      },
    ];
  }
  return [];
}

/**
 * Take what the backend's auto-complete filled in, as Triton's `UpdateModelConfig` does:
 * max_batch_size, inputs and outputs always; the scheduler only if the config had none.
 */
function mergeAutoComplete(config: ModelConfig, completed: ModelConfig): Diagnostic | undefined {
  config.maxBatchSize = completed.maxBatchSize;
  config.input = completed.input;
  config.output = completed.output;
  const before = config.schedulingChoice.case;
  const after = completed.schedulingChoice.case;
  if (before === undefined) config.schedulingChoice = completed.schedulingChoice;
  else if (after !== undefined && after !== before) {
    return { path: "", message: `Cannot update scheduling choice from ${before} to ${after} when auto-completing.` };
  }
  if (completed.modelTransactionPolicy) config.modelTransactionPolicy = completed.modelTransactionPolicy;
  return undefined;
}
