import type { ModelConfig } from "@galley/proto";
import type { BackendModel } from "../backend/backend.js";
import type { ModelStatistics } from "../base/statistics.js";
import { BatchMemory } from "../scheduler/batch-memory.js";
import type { Scheduler } from "../scheduler/scheduler.js";
import type { MemoryUsage } from "./memory-source.js";

/** The config parameter that keeps a model loaded whatever the memory budget: `parameters { key: "galley.pinned" value: { string_value: "true" } }`. */
export const PINNED_PARAMETER = "galley.pinned";

/** One READY model version: its final config, its scheduler over the backend's instances, its statistics. */
export class LoadedModel {
  constructor(
    readonly name: string,
    readonly version: number,
    readonly config: ModelConfig,
    readonly backend: BackendModel,
    readonly scheduler: Scheduler,
    /** Class labels by output name, from each output's `label_filename`. */
    readonly labels: ReadonlyMap<string, readonly string[]>,
    /** Shared with the scheduler, which records queue and execution times into it. */
    readonly stats: ModelStatistics,
  ) {}

  /** What the version holds, measured across its load and warmup (the statistics' `memory_usage`). */
  memory: MemoryUsage[] = [];
  /** Its GPU working memory per batch size, from warmup and every batch since (GPU-memory admission's estimates). */
  batchMemory = new BatchMemory();

  /** Its host working memory per batch size, from warmup (the peak resident set a sample took). */
  hostBatchMemory = new BatchMemory();

  /** The most GPU working memory a batch of each size took (bytes by batch size); empty where none was measured. */
  get workingMemory(): ReadonlyMap<number, number> {
    return this.batchMemory.peaks;
  }

  /** The most host memory a warm-up batch of each size took beyond what was held before it (bytes by batch size). */
  get hostWorkingMemory(): ReadonlyMap<number, number> {
    return this.hostBatchMemory.peaks;
  }
  /** When it became READY and when a request last started on it (the clock's nanoseconds): eviction's order. */
  loadedAtNs = 0n;
  lastUsedNs = 0n;
  /** Requests started on it and not finished: it is idle (evictable) only at 0. */
  active = 0;
  /** Set once eviction has taken it out of service: a request that found it before then looks again. */
  evicted = false;

  /** Marked pinned in its config: never evicted. */
  get pinned(): boolean {
    const value = this.config.parameters[PINNED_PARAMETER]?.stringValue.trim().toLowerCase();
    return value === "true" || value === "1" || value === "yes";
  }

  /** No request queued or running, and no state kept between requests (an open sequence). */
  get idle(): boolean {
    return this.active === 0 && !(this.scheduler.holding?.() ?? false);
  }

  get decoupled(): boolean {
    return this.config.modelTransactionPolicy?.decoupled ?? false;
  }

  /** False while the backend has an instance down (restarting after a failure): the version is then not ready. */
  get healthy(): boolean {
    return this.backend.healthy?.() ?? true;
  }

  /**
   * Finish everything accepted, then release the backend; one that sets `unloadTimeoutMs` is
   * released once that has passed even with requests still running, which then fail.
   */
  async unload(): Promise<void> {
    const drained = this.scheduler.drain();
    const limit = this.backend.unloadTimeoutMs;
    await (limit === undefined ? drained : settledWithin(drained, limit));
    await this.backend.unload();
    // What the backend failed, or what was still queued and now fails at once.
    await drained;
  }
}

/** Wait for `promise`, for at most `ms`. */
async function settledWithin(promise: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  await Promise.race([promise, timeout]);
  clearTimeout(timer);
}
