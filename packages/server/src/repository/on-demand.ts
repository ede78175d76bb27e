import type { Clock } from "../base/clock.js";
import { InferenceError, requestId as shownId } from "../base/errors.js";

/** The default bound on how long a request waits for its model's load on demand (`--load-on-demand-wait-secs`). */
export const DEFAULT_ON_DEMAND_WAIT_MS = 120_000;

/** How long one request may wait: its `timeout` parameter (µs) and its cancellation. */
export interface OnDemandWait {
  /** The request's `timeout` parameter in microseconds; 0 or absent: only the server's bound. */
  timeoutUs?: number;
  signal?: AbortSignal;
}

/** What {@link OnDemandLoads} starts loads and checks names with. */
export interface OnDemandOptions {
  /** The server's bound on a request's wait, in ms (default {@link DEFAULT_ON_DEMAND_WAIT_MS}). */
  waitMs?: number;
  clock: Clock;
  /** Whether `name` is a model folder of the repositories (only those load on demand). */
  inRepository(name: string): Promise<boolean>;
  /** Load `name` through the model manager's one load path (or wait for the load already running). */
  load(name: string): Promise<void>;
}

/**
 * Loads on demand: a request for a repository model with no READY version starts its load, and
 * every request for it that comes meanwhile waits for that same load. Each request waits at most
 * its own `timeout` and the server's bound; a request that stops waiting leaves the load running,
 * so the next one finds the model READY.
 */
export class OnDemandLoads {
  readonly #options: OnDemandOptions;
  readonly #running = new Map<string, Promise<void>>();
  /** Loads started on demand, by model name, for metrics. */
  readonly counts = new Map<string, number>();
  /** Requests waiting for a load on demand now, by model name. */
  readonly waiting = new Map<string, number>();

  constructor(options: OnDemandOptions) {
    this.#options = options;
  }

  /**
   * Wait until a load of `name` has settled. `unknown` is what the request gets for a name that is
   * no model folder of the repositories (its lookup error, unchanged).
   *
   * @throws {@link InferenceError} `unknown`, ON_DEMAND_LOAD_FAILED, ON_DEMAND_LOAD_TIMEOUT or CANCELLED.
   */
  wait(name: string, unknown: InferenceError, wait: OnDemandWait, requestId: string): Promise<void> {
    let running = this.#running.get(name);
    if (!running) {
      running = this.#start(name, unknown);
      this.#running.set(name, running);
      const forget = () => this.#running.delete(name);
      running.then(forget, forget);
    }
    this.waiting.set(name, (this.waiting.get(name) ?? 0) + 1);
    const done = () => {
      const left = (this.waiting.get(name) ?? 1) - 1;
      if (left > 0) this.waiting.set(name, left);
      else this.waiting.delete(name);
    };
    const bounded = this.#bounded(name, running, wait, requestId);
    bounded.then(done, done);
    return bounded;
  }

  async #start(name: string, unknown: InferenceError): Promise<void> {
    if (!(await this.#options.inRepository(name))) throw unknown;
    this.counts.set(name, (this.counts.get(name) ?? 0) + 1);
    try {
      await this.#options.load(name);
    } catch (error) {
      throw new InferenceError("ON_DEMAND_LOAD_FAILED", { model: name, detail: (error as Error).message });
    }
  }

  #bounded(name: string, running: Promise<void>, wait: OnDemandWait, requestId: string): Promise<void> {
    const { clock } = this.#options;
    const serverMs = this.#options.waitMs ?? DEFAULT_ON_DEMAND_WAIT_MS;
    const requestMs = wait.timeoutUs !== undefined && wait.timeoutUs > 0 ? wait.timeoutUs / 1000 : Infinity;
    const ms = Math.min(serverMs, requestMs);
    const signal = wait.signal;
    if (signal?.aborted) return Promise.reject(new InferenceError("CANCELLED", { id: shownId(requestId) }));
    return new Promise<void>((resolve, reject) => {
      let timer: unknown;
      const finish = () => {
        if (timer !== undefined) clock.clearTimer(timer);
        signal?.removeEventListener("abort", cancelled);
      };
      const cancelled = () => {
        finish();
        reject(new InferenceError("CANCELLED", { id: shownId(requestId) }));
      };
      signal?.addEventListener("abort", cancelled, { once: true });
      timer = clock.setTimer(() => {
        finish();
        reject(new InferenceError("ON_DEMAND_LOAD_TIMEOUT", { model: name, ms: Math.round(ms) }));
      }, ms);
      running.then(
        () => {
          finish();
          resolve();
        },
        (error: unknown) => {
          finish();
          reject(error);
        },
      );
    });
  }
}
