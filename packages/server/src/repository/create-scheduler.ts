import { Platform } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { Logger } from "../base/log.js";
import type { ModelStatistics } from "../base/statistics.js";
import type { Tensor } from "../base/tensor.js";
import type { BatchMemory } from "../scheduler/batch-memory.js";
import { DefaultScheduler } from "../scheduler/default-scheduler.js";
import { DynamicBatcher } from "../scheduler/dynamic-batcher.js";
import { type ComposingInfer, EnsembleScheduler } from "../scheduler/ensemble-scheduler.js";
import type { GpuMemoryAdmission } from "../scheduler/gpu-memory-admission.js";
import type { InstancePool } from "../scheduler/instance-pool.js";
import type { Scheduler } from "../scheduler/scheduler.js";
import { SequenceBatcher } from "../scheduler/sequence/sequence-batcher.js";

/** What {@link createScheduler} builds a model version's scheduler from. */
export interface SchedulerContext {
  /** The version's instances (none for an ensemble), with the rate limiter as their policy where there is one. */
  pool: InstancePool;
  stats: ModelStatistics;
  log: Logger;
  /** How an ensemble runs its steps: the server's own inference path. */
  infer?: ComposingInfer;
  /** A sequence-batching model's `initial_state` values (see `loadInitialStates`). */
  initialStates?: ReadonlyMap<string, Tensor>;
  /** Where the version's GPU working memory per batch size is recorded. */
  memory?: BatchMemory;
  /** GPU-memory admission (`--gpu-memory-admission`), which estimates from `memory`. */
  admission?: GpuMemoryAdmission;
}

/**
 * The scheduler a loaded version's config asks for: the ensemble scheduler for an ensemble, else
 * the dynamic batcher, the sequence batcher or the default scheduler over its instances.
 *
 * @throws Error when the config is an ensemble and the server gave no inference path.
 */
export function createScheduler(config: ModelConfig, context: SchedulerContext): Scheduler {
  const { pool, stats, log } = context;
  if (config.platform === Platform.ensemble) {
    if (!context.infer)
      throw new Error("this server cannot run ensembles (no inference path was given to the model manager)");
    return new EnsembleScheduler(config, context.infer, log);
  }
  if (config.schedulingChoice.case === "dynamicBatching") {
    return new DynamicBatcher({
      pool,
      config,
      stats,
      log,
      ...(context.memory ? { memory: context.memory } : {}),
      ...(context.admission ? { admission: context.admission } : {}),
    });
  }
  if (config.schedulingChoice.case === "sequenceBatching") {
    return new SequenceBatcher({
      pool,
      config,
      stats,
      log,
      initialStates: context.initialStates ?? new Map(),
      ...(context.memory ? { memory: context.memory } : {}),
      ...(context.admission ? { admission: context.admission } : {}),
    });
  }
  return new DefaultScheduler(pool, stats, context.memory, context.admission);
}
