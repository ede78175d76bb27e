import { InferenceError } from "../base/errors.js";
import type { Logger } from "../base/log.js";
import type { LoadedModel } from "./loaded-model.js";
import { bytesOf, type MemoryUsage } from "./memory-source.js";

/**
 * `--model-memory-budget`: how much memory the loaded models may hold together, per kind: host
 * memory and each GPU's, all enforced alike.
 */
export interface MemoryBudgetLimits {
  /** Host bytes (`host:<size>`). */
  host?: number;
  /** Bytes per GPU by CUDA ordinal (`gpu<N>:<size>`), measured per model by the GPU memory source. */
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

/** One limit of the budget: a kind of memory (host, or one GPU) and its bytes. */
interface Limit {
  type: MemoryUsage["type"];
  id: number;
  bytes: number;
  /** As the flag spells it: `host`, `gpu0`. */
  flag: string;
}

/**
 * Keeps the models' memory under the budget, for host memory and each GPU that has a limit, by one
 * rule. Loads pass one at a time (so each load's measurement is its own and two loads cannot both
 * take the last room): before a version loads, idle models are evicted least recently used first
 * until what it took last time fits under every limit; after it loaded, again until everything
 * fits. A model is never evicted while a request is queued or running on it, while it keeps an
 * open sequence, within `minResidencyNs` of its load, when its config pins it, or when it was
 * loaded from overrides (it could not be loaded again from disk); for a limit, only a model that
 * holds memory of that kind is evicted. When a load's known size cannot be made to fit, the load is
 * refused (MEMORY_BUDGET_FULL: the version is UNAVAILABLE with that reason, which, like an
 * eviction, leaves the server ready); a model loaded for the first time (its size unknown) that
 * leaves the models over the budget stays loaded, with a warning.
 */
export class MemoryBudget {
  readonly #limits: MemoryBudgetLimits;
  readonly #each: readonly Limit[];
  readonly #minResidencyNs: bigint;
  readonly #host: BudgetHost;
  readonly #log: Logger;
  #turn: Promise<void> = Promise.resolve();
  /** Evictions by model name, for metrics. */
  readonly evictions = new Map<string, number>();

  constructor(limits: MemoryBudgetLimits, minResidencyNs: bigint, host: BudgetHost, log: Logger) {
    this.#limits = limits;
    this.#each = [
      ...(limits.host !== undefined ? [{ type: "CPU" as const, id: 0, bytes: limits.host, flag: "host" }] : []),
      ...[...(limits.gpus ?? [])]
        .sort(([a], [b]) => a - b)
        .map(([id, bytes]) => ({ type: "GPU" as const, id, bytes, flag: `gpu${id}` })),
    ];
    this.#minResidencyNs = minResidencyNs;
    this.#host = host;
    this.#log = log;
  }

  get limits(): MemoryBudgetLimits {
    return this.#limits;
  }

  /**
   * Load one version of `name` within the budget: `load` runs in its turn, after room was made
   * for `expected` (what it took when last loaded; empty when unknown).
   *
   * @throws {@link InferenceError} MEMORY_BUDGET_FULL when the room cannot be made now, LOAD_FAILED
   * when the model is larger than a whole limit.
   */
  async admit(name: string, expected: readonly MemoryUsage[], load: () => Promise<LoadedModel>): Promise<LoadedModel> {
    const previous = this.#turn;
    let done!: () => void;
    this.#turn = new Promise((resolve) => {
      done = resolve;
    });
    await previous;
    try {
      if (this.#each.length === 0) return await load();
      for (const limit of this.#each) {
        const needs = bytesOf(expected, limit.type, limit.id);
        if (needs > limit.bytes) {
          throw new InferenceError("LOAD_FAILED", {
            model: name,
            detail: `it took ${mib(needs)} of ${describeKind(limit)} when last loaded, more than the whole --model-memory-budget ${limit.flag}:${mib(limit.bytes)}`,
          });
        }
      }
      for (const limit of this.#each) {
        const needs = bytesOf(expected, limit.type, limit.id);
        const room = await this.#makeRoom(name, limit, limit.bytes - needs);
        if (!room.fits) {
          throw new InferenceError("MEMORY_BUDGET_FULL", {
            detail:
              `${limit.flag}:${mib(limit.bytes)} for '${name}': it needs ${mib(needs)}, and ${mib(room.used)} is held ` +
              "by models that cannot be evicted now (busy, pinned, or loaded within --model-min-residency)",
          });
        }
      }
      const model = await load();
      for (const limit of this.#each) {
        const took = bytesOf(model.memory, limit.type, limit.id);
        const after = await this.#makeRoom(name, limit, limit.bytes - took);
        if (!after.fits) {
          this.#log.warn(
            `'${name}' version ${model.version} took ${mib(took)} of ${describeKind(limit)}: the models now hold ` +
              `${mib(after.used + took)}, over --model-memory-budget ${limit.flag}:${mib(limit.bytes)}, ` +
              "and none can be evicted now",
          );
        }
      }
      return model;
    } finally {
      done();
    }
  }

  /** Evict idle models holding memory of `limit`'s kind, least recently used first, until the others hold at most `room`. */
  async #makeRoom(loading: string, limit: Limit, room: number): Promise<{ fits: boolean; used: number }> {
    for (;;) {
      const loaded = this.#host.loaded();
      const used = loaded.reduce((sum, m) => sum + bytesOf(m.memory, limit.type, limit.id), 0);
      if (used <= room) return { fits: true, used };
      const victim = this.#victim(loading, loaded, limit);
      if (!victim) return { fits: false, used };
      this.#log.info(
        `evicting '${victim}' to fit --model-memory-budget ${limit.flag}:${mib(limit.bytes)} ` +
          `(models hold ${mib(used)}, loading '${loading}')`,
      );
      this.evictions.set(victim, (this.evictions.get(victim) ?? 0) + 1);
      await this.#host.evict(victim);
    }
  }

  /** The least recently used model whose every version may go now and that holds memory of `limit`'s kind; undefined when none may. */
  #victim(loading: string, loaded: readonly LoadedModel[], limit: Limit): string | undefined {
    const now = this.#host.now();
    const byName = new Map<string, LoadedModel[]>();
    for (const model of loaded) byName.set(model.name, [...(byName.get(model.name) ?? []), model]);
    let best: { name: string; used: bigint } | undefined;
    for (const [name, versions] of byName) {
      if (name === loading || !this.#host.evictable(name)) continue;
      const movable = versions.every((m) => m.idle && !m.pinned && now - m.loadedAtNs >= this.#minResidencyNs);
      // A model that holds nothing of this kind frees nothing of it.
      if (!movable || versions.every((m) => bytesOf(m.memory, limit.type, limit.id) === 0)) continue;
      let used = 0n;
      for (const m of versions) if (m.lastUsedNs > used) used = m.lastUsedNs;
      if (!best || used < best.used) best = { name, used };
    }
    return best?.name;
  }
}

function describeKind(limit: Limit): string {
  return limit.type === "CPU" ? "host memory" : `GPU ${limit.id} memory`;
}
