import { join } from "node:path";
import { Platform, PYTHON_BASED_RUNTIME } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { BackendRegistry } from "../backend/registry.js";
import type { DeviceMemoryReader } from "../base/device-memory.js";
import { FIRST_RESPONSE_BUCKETS, FIRST_RESPONSE_HISTOGRAM } from "../base/latency-histogram.js";
import type { Logger } from "../base/log.js";
import { ModelStatistics } from "../base/statistics.js";
import { BatchMemory } from "../scheduler/batch-memory.js";
import type { ComposingInfer } from "../scheduler/ensemble-scheduler.js";
import type { GpuMemoryAdmission } from "../scheduler/gpu-memory-admission.js";
import { InstancePool } from "../scheduler/instance-pool.js";
import type { RateLimiter } from "../scheduler/rate-limiter.js";
import { createScheduler } from "./create-scheduler.js";
import { loadInitialStates } from "./initial-state.js";
import { LoadSlots } from "./load-slots.js";
import { LoadedModel } from "./loaded-model.js";
import { describeMemory, hostMemorySource, type MemorySource } from "./memory-source.js";
import { readModelFile } from "./model-file.js";
import { warmUp } from "./warmup.js";
import { workingMemoryProbe } from "./working-memory.js";

/** What {@link VersionLoader} loads versions with. */
export interface VersionLoaderOptions {
  backends: BackendRegistry;
  log: Logger;
  /** `--model-load-thread-count` (default 4). */
  loadThreads?: number;
  /**
   * `--model-load-retry-count` (default 0): a version whose load fails is loaded again at once, up
   * to this many more times, holding its load slot (Triton's `ModelLifeCycle` retry loop).
   */
  loadRetries?: number;
  /** How an ensemble runs its steps: the server's own inference path. */
  infer?: ComposingInfer;
  /** `--rate-limit execution_count`: instances execute only with their resources. */
  rateLimiter?: RateLimiter;
  /** What measures a version's memory across its load and warmup (default: host RSS, {@link hostMemorySource}). */
  memory?: MemorySource;
  /** The memory budget's turn for one version's load (see `MemoryBudget.admit`); absent: no budget. */
  admit?: (name: string, version: number, load: () => Promise<LoadedModel>) => Promise<LoadedModel>;
  /** The clock's nanoseconds, for `LoadedModel.loadedAtNs` (default: process.hrtime). */
  now?: () => bigint;
  /** `--metrics-config histogram_latencies=true`: each version keeps its first-response histogram. */
  histogramLatencies?: boolean;
  /** `--gpu-memory-admission`: batches on a GPU start only when their working memory fits. */
  admission?: GpuMemoryAdmission;
  /** NVML's per-process figures, for the GPU working memory of instances in processes of their own (Python stubs). */
  deviceMemory?: DeviceMemoryReader;
}

/**
 * Loads one checked version: its backend's instances (labels and initial states read first),
 * its warmup samples, and the scheduler its config asks for. At most `loadThreads` versions load
 * at once.
 */
export class VersionLoader {
  readonly #options: VersionLoaderOptions;
  readonly #slots: LoadSlots;
  readonly #memory: MemorySource;

  constructor(options: VersionLoaderOptions) {
    this.#options = options;
    this.#slots = new LoadSlots(options.loadThreads ?? 4);
    this.#memory = options.memory ?? hostMemorySource();
  }

  /** @throws Error with the reason the version is UNAVAILABLE. */
  async load(
    name: string,
    version: number,
    config: ModelConfig,
    modelPath: string,
    signal: AbortSignal,
  ): Promise<LoadedModel> {
    await this.#slots.acquire();
    try {
      const load = async () => {
        const loaded = await this.#loadRetrying(name, version, config, modelPath, signal);
        loaded.loadedAtNs = this.#options.now?.() ?? process.hrtime.bigint();
        loaded.lastUsedNs = loaded.loadedAtNs;
        return loaded;
      };
      const admit = this.#options.admit;
      // An ensemble holds nothing of its own: its composing models load (and are admitted) apart.
      return admit && config.platform !== Platform.ensemble ? await admit(name, version, load) : await load();
    } finally {
      this.#slots.release();
    }
  }

  async #loadRetrying(
    name: string,
    version: number,
    config: ModelConfig,
    modelPath: string,
    signal: AbortSignal,
  ): Promise<LoadedModel> {
    const retries = this.#options.loadRetries ?? 0;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#loadOnce(name, version, config, modelPath, signal);
      } catch (error) {
        if (attempt >= retries || signal.aborted) throw error;
        this.#options.log.warn(
          `failed to load '${name}' version ${version}: ${(error as Error).message}; ` +
            `retrying (${attempt + 1} of --model-load-retry-count ${retries})`,
        );
      }
    }
  }

  async #loadOnce(
    name: string,
    version: number,
    config: ModelConfig,
    modelPath: string,
    signal: AbortSignal,
  ): Promise<LoadedModel> {
    const log = this.#options.log;
    if (config.platform === Platform.ensemble) {
      const stats = this.#statistics(config);
      const scheduler = createScheduler(config, {
        pool: new InstancePool([]),
        stats,
        log,
        infer: this.#options.infer,
      });
      const nothing = { instances: [], unload: async () => {} };
      return new LoadedModel(name, version, config, nothing, scheduler, new Map(), stats);
    }
    const backend = this.#options.backends.get(config.backend, config.runtime);
    if (!backend && config.runtime === PYTHON_BASED_RUNTIME) {
      throw new Error(
        `unable to find Python backend based backend library '${config.runtime}' for model '${config.name}', searched: '${config.backend}/${config.runtime}'`,
      );
    }
    if (!backend) {
      throw new Error(
        `unable to find backend library for backend '${config.backend}', try specifying runtime on the model configuration.`,
      );
    }
    const labels = await readLabels(config, modelPath);
    const initialStates = await loadInitialStates(config, modelPath);
    const measured = await this.#memory.begin();
    const model = await backend.load({
      config,
      version,
      modelPath,
      versionPath: join(modelPath, String(version)),
      signal,
      log,
    });
    // The rate limiter admits each instance now, so a limit no instance fits fails the load before warmup.
    const pool = new InstancePool(
      model.instances,
      this.#options.rateLimiter,
      config.schedulingChoice.case !== "sequenceBatching",
    );
    const memory = new BatchMemory();
    const hostMemory = new BatchMemory();
    const probe = workingMemoryProbe(this.#options.deviceMemory);
    try {
      await warmUp(config, model.instances, modelPath, { gpu: memory, host: hostMemory, probe });
    } catch (error) {
      await model.unload();
      throw error;
    }
    const stats = this.#statistics(config);
    const admission = this.#options.admission;
    const scheduler = createScheduler(config, {
      pool,
      stats,
      log,
      initialStates,
      memory,
      ...(admission ? { admission } : {}),
    });
    const loaded = new LoadedModel(name, version, config, model, scheduler, labels, stats);
    loaded.memory = await measured(model);
    loaded.batchMemory = memory;
    loaded.hostBatchMemory = hostMemory;
    log.info(
      `loaded '${name}' version ${version}: ${describeMemory(loaded.memory)}` +
        `${config.modelWarmup.length > 0 ? " (measured after warmup)" : ""}` +
        describePeaks("host", hostMemory) +
        describePeaks("GPU", memory),
    );
    return loaded;
  }

  /**
   * A version's statistics; with histogram latencies on, its first-response histogram over the
   * config's `model_metrics` buckets for that family, else Triton's defaults.
   */
  #statistics(config: ModelConfig): ModelStatistics {
    if (!this.#options.histogramLatencies) return new ModelStatistics();
    let buckets = FIRST_RESPONSE_BUCKETS;
    for (const control of config.modelMetrics?.metricControl ?? []) {
      if (control.metricIdentifier?.family !== FIRST_RESPONSE_HISTOGRAM) continue;
      if (control.metricOptions.case === "histogramOptions") buckets = control.metricOptions.value.buckets;
    }
    return new ModelStatistics(buckets);
  }
}

/** `; host working memory: batch 1 3.0 MiB, batch 4 11.5 MiB` for a log line; "" when nothing was measured. */
function describePeaks(kind: string, memory: BatchMemory): string {
  const peaks = [...memory.peaks]
    .sort(([a], [b]) => a - b)
    .map(([size, bytes]) => `batch ${size} ${(bytes / 2 ** 20).toFixed(1)} MiB`);
  return peaks.length > 0 ? `; ${kind} working memory: ${peaks.join(", ")}` : "";
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
