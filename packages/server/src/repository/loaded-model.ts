import type { ModelConfig } from "@galley/proto";
import type { BackendModel } from "../backend/backend.js";
import type { ModelStatistics } from "../core/statistics.js";
import type { Scheduler } from "../scheduler/scheduler.js";

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

  get decoupled(): boolean {
    return this.config.modelTransactionPolicy?.decoupled ?? false;
  }

  /** False while the backend has an instance down (restarting after a failure): the version is then not ready. */
  get healthy(): boolean {
    return this.backend.healthy?.() ?? true;
  }

  /** Finish everything accepted, then release the backend. */
  async unload(): Promise<void> {
    await this.scheduler.drain();
    await this.backend.unload();
  }
}
