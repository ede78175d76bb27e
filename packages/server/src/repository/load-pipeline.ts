import { type ModelSource, parseModelConfig, versionsToLoad } from "@galley/config";
import { InferenceError } from "../base/errors.js";
import type { LoadOverrides } from "../base/load-overrides.js";
import type { Logger } from "../base/log.js";
import { removeFileOverrides } from "./file-overrides.js";
import type { LoadChecks } from "./load-checks.js";
import type { LoadedModel } from "./loaded-model.js";
import type { ModelEntry } from "./model-entry.js";
import type { ModelCopy } from "./model-repository.js";
import { modelSource, type SourceOptions } from "./model-source.js";
import type { VersionLoader } from "./version-loader.js";

/** The steps {@link LoadPipeline} runs, each its own module. */
export interface LoadPipelineOptions {
  log: Logger;
  source: SourceOptions;
  checks: LoadChecks;
  versions: VersionLoader;
}

/**
 * One load of one model, step by step: its source (folder or overrides) → `file:` overrides
 * written → Triton's checks (an ensemble's composing models loaded first) → every version loaded
 * in parallel, warmed up, while the old ones keep serving → the new set swapped in and the old
 * one unloaded. A failure leaves the versions that were serving READY and answers with Triton's
 * load error.
 */
export class LoadPipeline {
  readonly #options: LoadPipelineOptions;
  readonly #log: Logger;

  constructor(options: LoadPipelineOptions) {
    this.#options = options;
    this.#log = options.log;
  }

  /**
   * Load `entry` with `overrides`; `chain` is the ensembles whose loads led here.
   *
   * @throws {@link InferenceError} as Triton answers a load request.
   */
  async run(entry: ModelEntry, overrides: LoadOverrides, chain: readonly string[], signal: AbortSignal): Promise<void> {
    if (signal.aborted)
      throw new InferenceError("LOAD_FAILED", { model: entry.name, detail: "the load was cancelled" });
    const started = process.hrtime.bigint();
    let source: ModelSource;
    let copy: ModelCopy | undefined;
    try {
      ({ source, copy } = await modelSource(entry.name, overrides, this.#options.source, signal));
    } catch (error) {
      if (error instanceof InferenceError && error.id !== "POLL_FAILED") throw error;
      throw new InferenceError("POLL_FAILED", { model: entry.name }, { cause: error });
    }
    // A folder of `file:` overrides belongs to the model only once it serves; until then a failure removes it.
    const written = overrides.files && overrides.files.size > 0 ? source.path : undefined;
    // LOADING from here, as in Triton: auto-complete and an ensemble's composing models take time,
    // during which ready and infer answer "not ready" rather than "unknown model".
    const settle = entry.versions.beginLoad(plannedVersions(source));
    try {
      await this.#loadSource(entry, source, copy, written, chain, started, signal);
    } catch (error) {
      if (written && entry.overrideFolder !== written) await removeFileOverrides(written);
      if (copy && entry.copy !== copy) await copy.remove?.();
      throw error;
    } finally {
      settle();
    }
  }

  /**
   * Unload every version of `entry` (and its `file:` overrides, its downloaded copy); each version
   * ends UNAVAILABLE with `reason`.
   */
  async unload(entry: ModelEntry, reason: string): Promise<void> {
    const unloaded = await entry.versions.unloadAll(reason);
    entry.fingerprint = undefined;
    const copy = entry.copy;
    entry.copy = undefined;
    await copy?.remove?.();
    if (entry.overrideFolder) {
      await removeFileOverrides(entry.overrideFolder);
      entry.overrideFolder = undefined;
    }
    if (unloaded > 0) this.#log.info(`successfully unloaded '${entry.name}'`);
  }

  async #loadSource(
    entry: ModelEntry,
    source: ModelSource,
    copy: ModelCopy | undefined,
    written: string | undefined,
    chain: readonly string[],
    started: bigint,
    signal: AbortSignal,
  ): Promise<void> {
    const versions = entry.versions;
    // Polling retries a failed model only when its files change, as Triton does.
    const fingerprint = copy?.fingerprint;
    const check = await this.#options.checks.check(source, entry.name, chain);
    if (check.diagnostics.length > 0 || !check.config) {
      entry.fingerprint = fingerprint;
      const message = check.diagnostics[0]?.message ?? "invalid model configuration";
      this.#log.error(`Poll failed for model directory '${entry.name}': ${message}`);
      versions.pollFailed(source.versions.length > 0 ? source.versions : [1], message);
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
    for (const version of check.versions) versions.loading(version);
    await Promise.all(
      check.versions.map(async (version) => {
        try {
          loaded.set(
            version,
            await this.#options.versions.load(entry.name, version, config, source.path ?? "", signal),
          );
          versions.loaded(version);
        } catch (error) {
          const reason = `${(error as Error).message}`;
          versions.failed(version, reason);
          errors.push(`version ${version} is at UNAVAILABLE state: Invalid argument: ${reason};`);
        }
      }),
    );
    if (errors.length > 0) {
      entry.fingerprint = fingerprint;
      await Promise.all([...loaded.values()].map((m) => m.unload()));
      versions.keepServing();
      this.#log.error(`failed to load '${entry.name}': ${errors.join(" ")}`);
      throw new InferenceError("LOAD_FAILED_REASON", { model: entry.name, detail: errors.join(" ") });
    }
    const previous = versions.swap(loaded);
    entry.fingerprint = fingerprint;
    if (entry.overrideFolder && entry.overrideFolder !== source.path) await removeFileOverrides(entry.overrideFolder);
    entry.overrideFolder = written;
    // The old versions read the old copy until they are retired.
    const oldCopy = entry.copy;
    entry.copy = copy;
    await versions.retire(previous, loaded);
    if (oldCopy && oldCopy !== copy) await oldCopy.remove?.();
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    for (const model of loaded.values()) model.stats.loadSeconds = seconds;
    this.#log.info(
      `successfully loaded '${entry.name}' version ${check.versions.join(", ")} in ${seconds.toFixed(3)} s`,
    );
  }
}

/**
 * The versions a load of `source` expects to load, from its config as written (Triton's
 * `VersionsToLoad` before the backend sees it); none when the config does not parse (the checks
 * then fail the load).
 */
function plannedVersions(source: ModelSource): number[] {
  try {
    return versionsToLoad(source.config ?? parseModelConfig(source.configText ?? ""), source.versions);
  } catch {
    return [];
  }
}
