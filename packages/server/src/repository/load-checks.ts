import {
  type CheckOptions,
  checkModel,
  checkRepository,
  type ModelCheck,
  type ModelSource,
  Platform,
  PYTHON_BASED_RUNTIME,
} from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { BackendRegistry } from "../backend/registry.js";
import type { LoadedModel } from "./loaded-model.js";
import { checkConfigFiles } from "./model-file.js";

/** What {@link LoadChecks} needs from the server and the model manager. */
export interface LoadChecksOptions {
  backends: BackendRegistry;
  /** `--disable-auto-complete-config` turns this off. */
  autoComplete?: boolean;
  /** The GPU ids this server can use (KIND_GPU groups name them, KIND_AUTO becomes GPU where there are some). */
  gpus?: () => Promise<readonly number[]>;
  /** The READY versions of a model, to check an ensemble against its composing models' final configs. */
  ready(name: string): ReadonlyMap<number, LoadedModel> | undefined;
  /** Load a composing model; `chain` is the ensembles whose loads led there, outermost first. */
  loadComposing(name: string, chain: readonly string[]): Promise<void>;
}

/**
 * Triton's load checks of one model: its file names, its config (auto-completed by its backend)
 * and, for an ensemble, its steps against the composing models, which are loaded first. A
 * composing model whose load would wait on an ensemble of the same chain is a cycle: both the
 * ensemble it closes on and the one that found it fail with the same `dependency` diagnostic.
 */
export class LoadChecks {
  readonly #options: LoadChecksOptions;
  /** A cycle found below an ensemble's load, by the ensemble it closes on, to fail that one with the same text. */
  readonly #cycles = new Map<string, string>();

  constructor(options: LoadChecksOptions) {
    this.#options = options;
  }

  /** Check `source` for a load of `name` reached through the ensembles of `chain`. */
  async check(source: ModelSource, name: string, chain: readonly string[]): Promise<ModelCheck> {
    const refused = source.config ? fileProblem(source.config) : undefined;
    if (refused) return { name, versions: [], diagnostics: [{ path: "config", message: refused }] };
    const check = await this.#checkConfig(source, name, chain);
    const problem = check.config ? fileProblem(check.config) : undefined;
    return problem ? { ...check, diagnostics: [{ path: "config", message: problem }] } : check;
  }

  async #checkConfig(source: ModelSource, name: string, chain: readonly string[]): Promise<ModelCheck> {
    const backends = this.#options.backends;
    const options: CheckOptions = {
      autoComplete: this.#options.autoComplete ?? true,
      backends,
      pythonBasedBackends: { has: (name) => backends.get(name, PYTHON_BASED_RUNTIME) !== undefined },
      gpus: (await this.#options.gpus?.()) ?? [],
      backendAutoComplete: (s, config, version) =>
        backends.get(config.backend, config.runtime)?.autoComplete?.(config, s.path ?? "", version),
    };
    // A model that is not an ensemble has nothing more to check (its backend's auto-complete ran
    // once: for a scripted model that is a worker started and stopped, so it must not run twice).
    const own = await checkModel(source, options);
    if (own.diagnostics.length > 0 || own.config?.platform !== Platform.ensemble) return own;
    // An ensemble loads its composing models first, then is checked against their final configs.
    const steps =
      own.config.schedulingChoice.case === "ensembleScheduling" ? own.config.schedulingChoice.value.step : [];
    const composing = [...new Set(steps.map((s) => s.modelName))].filter((n) => n !== name);
    // A composing model already being loaded by an outer ensemble of this chain is a cycle: waiting
    // for it would wait for ourselves.
    const path = [...chain, name];
    for (const model of composing) {
      const at = path.indexOf(model);
      if (at < 0) continue;
      const cycle = path.slice(at);
      const message = `circular dependency between ensembles: ${cycle[0]} -> ... -> ${cycle.at(-1)} -> ${cycle[0]}`;
      this.#cycles.set(model, message);
      return { name, versions: [], diagnostics: [{ path: "dependency", message }] };
    }
    await Promise.all(
      composing.map((n) =>
        this.#options.ready(n)?.size ? undefined : this.#options.loadComposing(n, path).catch(() => undefined),
      ),
    );
    const cycle = this.#cycles.get(name);
    if (cycle) {
      this.#cycles.delete(name);
      return { name, versions: [], diagnostics: [{ path: "dependency", message: cycle }] };
    }
    const loadedSources: ModelSource[] = composing.flatMap((n) => {
      const ready = this.#options.ready(n);
      const first = ready ? [...ready.values()][0] : undefined;
      return first ? [{ name: n, config: first.config, versions: [...(ready?.keys() ?? [])] }] : [];
    });
    // The composing models' configs are final (auto-completed when they loaded): not again.
    const final = new Set(loadedSources);
    const checks = await checkRepository([source, ...loadedSources], {
      ...options,
      backendAutoComplete: (s, config, version) =>
        final.has(s) ? undefined : options.backendAutoComplete?.(s, config, version),
    });
    return checks.get(name) ?? own;
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
