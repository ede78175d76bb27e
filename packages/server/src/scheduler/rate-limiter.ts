import type { ModelRateLimiter } from "@galley/proto";
import type { BackendInstance } from "../backend/backend.js";
import type { ExecutionPolicy } from "./instance-pool.js";

/** `--rate-limit-resource <name>:<count>[:<device>]`. */
export interface ResourceLimit {
  name: string;
  count: number;
  /** Undefined for a resource of every device (and for global resources). */
  device?: number;
}

interface Waiter {
  needs: Map<string, number>;
  key: string;
  weight: number;
  grant(): void;
}

/**
 * Triton's rate limiter (`--rate-limit execution_count`): an instance may execute only once it
 * holds the resources its `instance_group.rate_limiter` asks for, from one server-wide pool. A
 * resource's capacity is `--rate-limit-resource`, or else the most any one instance asks for.
 * Among waiting instances, `priority` weighs turns: an instance with priority 2 gets half the
 * turns of one with priority 1. Galley runs on one device, so device resources share device 0.
 * It is the execution policy of every rate-limited model's instance pool.
 */
export class RateLimiter implements ExecutionPolicy {
  readonly #explicit: Map<string, number>;
  readonly #capacity = new Map<string, number>();
  readonly #used = new Map<string, number>();
  readonly #served = new Map<string, number>();
  readonly #waiting: Waiter[] = [];

  constructor(limits: readonly ResourceLimit[] = []) {
    this.#explicit = new Map(
      limits.filter((l) => l.device === undefined || l.device === 0).map((l) => [key(l.name, false), l.count]),
    );
    for (const limit of limits) {
      if (limit.device === undefined) this.#explicit.set(key(limit.name, true), limit.count);
    }
  }

  /**
   * Register an instance's needs; fails as Triton does when an explicit limit is below what an
   * instance needs (it could never run).
   */
  register(limiter: ModelRateLimiter | undefined): void {
    for (const resource of limiter?.resources ?? []) {
      const k = key(resource.name, resource.global);
      if (this.#capacity.has(key(resource.name, !resource.global))) {
        throw new Error(
          `Resource "${resource.name}" is present as both global and device-specific resource in the model configuration.`,
        );
      }
      const explicit = this.#explicit.get(k);
      if (explicit !== undefined) {
        if (explicit < resource.count) {
          throw new Error(
            `Resource count for "${resource.name}" is limited to ${explicit} which will prevent scheduling of one or more model instances, the minimum required count is ${resource.count}`,
          );
        }
        this.#capacity.set(k, explicit);
      } else {
        this.#capacity.set(k, Math.max(this.#capacity.get(k) ?? 0, resource.count));
      }
    }
  }

  /** {@link register} the instance's `rate_limiter`. */
  admit(instance: BackendInstance): void {
    this.register(instance.rateLimiter);
  }

  /** Wait for the instance's resources; resolves with the function that gives them back. */
  acquire(instance: BackendInstance): Promise<() => void> {
    const limiter = instance.rateLimiter;
    const needs = new Map<string, number>();
    for (const r of limiter?.resources ?? [])
      needs.set(key(r.name, r.global), (needs.get(key(r.name, r.global)) ?? 0) + r.count);
    const weight = Math.max(1, limiter?.priority ?? 1);
    return new Promise((resolve) => {
      this.#waiting.push({
        needs,
        key: instance.name,
        weight,
        grant: () =>
          resolve(() => {
            for (const [k, n] of needs) this.#used.set(k, (this.#used.get(k) ?? 0) - n);
            this.#grant();
          }),
      });
      this.#grant();
    });
  }

  /** Hand out resources to waiting instances, fewest weighted turns first. */
  #grant(): void {
    for (;;) {
      const candidates = this.#waiting
        .filter((w) => [...w.needs].every(([k, n]) => (this.#used.get(k) ?? 0) + n <= (this.#capacity.get(k) ?? 0)))
        .sort((a, b) => (this.#served.get(a.key) ?? 0) * a.weight - (this.#served.get(b.key) ?? 0) * b.weight);
      const next = candidates[0];
      if (!next) return;
      this.#waiting.splice(this.#waiting.indexOf(next), 1);
      for (const [k, n] of next.needs) this.#used.set(k, (this.#used.get(k) ?? 0) + n);
      this.#served.set(next.key, (this.#served.get(next.key) ?? 0) + 1);
      next.grant();
    }
  }
}

function key(name: string, global: boolean): string {
  return `${global ? "global" : "device0"}:${name}`;
}
