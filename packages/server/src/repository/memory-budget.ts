import { InferenceError } from "../base/errors.js";
import type { Logger } from "../base/log.js";
import type { LoadedModel } from "./loaded-model.js";
import { bytesOf } from "./memory-source.js";

/**
 * `--model-memory-budget`: how much memory the loaded models may hold together, per kind. Host
 * memory is enforced; GPU budgets are read and kept for the GPU accounting to enforce.
 */
export interface MemoryBudgetLimits {
  /** Host bytes (`host:<size>`). */
  host?: number;
  /** Bytes per GPU (`gpu<N>:<size>`); not enforced yet. */
  gpus?: ReadonlyMap<number, number>;
}

/** What the budget needs of the model manager. */
export interface BudgetHost {
  /** Every READY version of every model. */
  loaded(): LoadedModel[];
  /** Whether the model named may be evicted at all (loaded from the repository, no load running). */
  evictable(name: string): boolean;
  /** Take the model's versions out of service (synchronously) and unload them. */
  evict(name: string): Promise<void>;
  /** The clock's nanoseconds. */
  now(): bigint;
}

const MIB = 1024 * 1024;
const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;

/**
 * Keeps the models' host memory under the budget. Loads pass one at a time (so each load's
 * measurement is its own and two loads cannot both take the last room): before a version loads,
 * idle models are evicted least recently used first until what it took last time fits; after it
 * loaded, again until everything fits. A model is never evicted while a request is queued or
 * running on it, while it keeps an open sequence, within `minResidencyNs` of its load, when its
 * config pins it, or when it was loaded from overrides (it could not be loaded again from disk).
 * When a load's known size cannot be made to fit, the load is refused (MEMORY_BUDGET_FULL: the
 * version is UNAVAILABLE with that reason, which, like an eviction, leaves the server ready); a model loaded for the
 * first time (its size unknown) that leaves the models over the budget stays loaded, with a warning.
 */
export class MemoryBudget {
  readonly #limits: MemoryBudgetLimits;
  readonly #minResidencyNs: bigint;
  readonly #host: BudgetHost;
  readonly #log: Logger;
  #turn: Promise<void> = Promise.resolve();
  /** Evictions by model name, for metrics. */
  readonly evictions = new Map<string, number>();

  constructor(limits: MemoryBudgetLimits, minResidencyNs: bigint, host: BudgetHost, log: Logger) {
    this.#limits = limits;
    this.#minResidencyNs = minResidencyNs;
    this.#host = host;
    this.#log = log;
  }

  get limits(): MemoryBudgetLimits {
    return this.#limits;
  }

  /**
   * Load one version of `name` within the budget: `load` runs in its turn, after room was made
   * for `expectedBytes` (its last measured size; 0 when unknown).
   *
   * @throws {@link InferenceError} MEMORY_BUDGET_FULL when the room cannot be made now, LOAD_FAILED
   * when the model is larger than the whole budget.
   */
  async admit(name: string, expectedBytes: number, load: () => Promise<LoadedModel>): Promise<LoadedModel> {
    const previous = this.#turn;
    let done!: () => void;
    this.#turn = new Promise((resolve) => {
      done = resolve;
    });
    await previous;
    try {
      const budget = this.#limits.host;
      if (budget === undefined) return await load();
      if (expectedBytes > budget) {
        throw new InferenceError("LOAD_FAILED", {
          model: name,
          detail: `it took ${mib(expectedBytes)} of host memory when last loaded, more than the whole --model-memory-budget host:${mib(budget)}`,
        });
      }
      const room = await this.#makeRoom(name, budget - expectedBytes);
      if (!room.fits) {
        throw new InferenceError("MEMORY_BUDGET_FULL", {
          detail:
            `host:${mib(budget)} for '${name}': it needs ${mib(expectedBytes)}, and ${mib(room.used)} is held ` +
            "by models that cannot be evicted now (busy, pinned, or loaded within --model-min-residency)",
        });
      }
      const model = await load();
      const after = await this.#makeRoom(name, budget - bytesOf(model.memory, "CPU"));
      if (!after.fits) {
        this.#log.warn(
          `'${name}' version ${model.version} took ${mib(bytesOf(model.memory, "CPU"))}: the models now hold ` +
            `${mib(after.used + bytesOf(model.memory, "CPU"))}, over --model-memory-budget host:${mib(budget)}, ` +
            "and none can be evicted now",
        );
      }
      return model;
    } finally {
      done();
    }
  }

  /** Evict idle models, least recently used first, until the others hold at most `limit`. */
  async #makeRoom(loading: string, limit: number): Promise<{ fits: boolean; used: number }> {
    for (;;) {
      const loaded = this.#host.loaded();
      const used = loaded.reduce((sum, m) => sum + bytesOf(m.memory, "CPU"), 0);
      if (used <= limit) return { fits: true, used };
      const victim = this.#victim(loading, loaded);
      if (!victim) return { fits: false, used };
      this.#log.info(
        `evicting '${victim}' to fit --model-memory-budget host:${mib(this.#limits.host ?? 0)} ` +
          `(models hold ${mib(used)}, loading '${loading}')`,
      );
      this.evictions.set(victim, (this.evictions.get(victim) ?? 0) + 1);
      await this.#host.evict(victim);
    }
  }

  /** The least recently used model whose every version may go now; undefined when none may. */
  #victim(loading: string, loaded: readonly LoadedModel[]): string | undefined {
    const now = this.#host.now();
    const byName = new Map<string, LoadedModel[]>();
    for (const model of loaded) byName.set(model.name, [...(byName.get(model.name) ?? []), model]);
    let best: { name: string; used: bigint } | undefined;
    for (const [name, versions] of byName) {
      if (name === loading || !this.#host.evictable(name)) continue;
      const movable = versions.every((m) => m.idle && !m.pinned && now - m.loadedAtNs >= this.#minResidencyNs);
      // A model that holds nothing frees nothing.
      if (!movable || versions.every((m) => bytesOf(m.memory, "CPU") === 0)) continue;
      let used = 0n;
      for (const m of versions) if (m.lastUsedNs > used) used = m.lastUsedNs;
      if (!best || used < best.used) best = { name, used };
    }
    return best?.name;
  }
}
