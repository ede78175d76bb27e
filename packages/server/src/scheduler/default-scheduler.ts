import type { BackendInstance } from "../backend/backend.js";
import { now, onceThisTurn, systemClock } from "../base/clock.js";
import { backendError, InferenceError, requestId } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { ModelStatistics } from "../base/statistics.js";
import type { InstancePool } from "./instance-pool.js";
import type { ScheduledResult, Scheduler } from "./scheduler.js";

interface Pending {
  request: InferenceRequest;
  batchSize: number;
  enqueuedNs: bigint;
  resolve(result: ScheduledResult): void;
  reject(error: InferenceError): void;
  onAbort?: () => void;
}

/**
 * Triton's default scheduler: each request runs alone on the first free instance; when every
 * instance is busy, requests wait in one FIFO queue. A request cancelled while it waits leaves
 * the queue at once.
 *
 * Requests start at the end of the event-loop turn they arrived in (one `setImmediate`), not
 * inside the socket read that decoded them: the turn's reads are decoded one after another, then
 * its runs made one after another, each kind of work with warm caches (for `simple` at c = 16,
 * server CPU per request fell from ~1.8× the hand-written server's to 1.1–1.7×: bench/README.md);
 * a lone request waits one loop iteration, a few µs.
 */
export class DefaultScheduler implements Scheduler {
  readonly #pool: InstancePool;
  readonly #queue: Pending[] = [];
  readonly #stats: ModelStatistics;
  #running = 0;
  #draining = false;
  #drained?: () => void;

  constructor(pool: InstancePool, stats: ModelStatistics) {
    this.#pool = pool;
    this.#stats = stats;
  }

  enqueue(request: InferenceRequest, batchSize: number): Promise<ScheduledResult> {
    return new Promise((resolve, reject) => {
      const pending: Pending = { request, batchSize, enqueuedNs: now(), resolve, reject };
      const signal = request.signal;
      if (signal?.aborted) {
        reject(new InferenceError("CANCELLED", { id: requestId(request.id) }));
        return;
      }
      if (signal) {
        // Through a local: a function literal assigned to a property is made in the old
        // generation and keeps the request from young collections (development.md).
        const onAbort = () => {
          const at = this.#queue.indexOf(pending);
          if (at === -1) return;
          this.#queue.splice(at, 1);
          this.#stats.pending--;
          reject(new InferenceError("CANCELLED", { id: requestId(request.id) }));
          this.#checkDrained();
        };
        pending.onAbort = onAbort;
        signal.addEventListener("abort", onAbort, { once: true });
      }
      this.#queue.push(pending);
      this.#stats.pending++;
      this.#dispatchSoon();
    });
  }

  drain(): Promise<void> {
    this.#draining = true;
    return new Promise((resolve) => {
      this.#drained = resolve;
      this.#checkDrained();
    });
  }

  readonly #dispatchSoon = onceThisTurn(systemClock, () => this.#dispatch());

  #dispatch(): void {
    while (this.#pool.hasIdle && this.#queue.length > 0) {
      const instance = this.#pool.take() as BackendInstance;
      const pending = this.#queue.shift() as Pending;
      this.#stats.pending--;
      if (pending.onAbort) pending.request.signal?.removeEventListener("abort", pending.onAbort);
      this.#run(instance, pending);
    }
  }

  async #run(instance: BackendInstance, pending: Pending): Promise<void> {
    this.#running++;
    const queueNs = now() - pending.enqueuedNs;
    try {
      const result = await this.#pool.execute(instance, [pending.request]);
      this.#stats.recordExecution(
        pending.batchSize,
        1,
        result.computeInputNs,
        result.computeInferNs,
        result.computeOutputNs,
      );
      const outcome = result.responses[0];
      if (outcome === undefined) throw new InferenceError("BACKEND_NO_RESPONSE");
      if (outcome instanceof Error) throw backendError(outcome);
      const parameters = result.parameters?.[0];
      pending.resolve({ outputs: outcome, queueNs, ...(parameters ? { parameters } : {}) });
    } catch (error) {
      pending.reject(backendError(error));
    } finally {
      this.#running--;
      this.#pool.give(instance);
      this.#dispatch();
      this.#checkDrained();
    }
  }

  #checkDrained(): void {
    if (this.#draining && this.#running === 0 && this.#queue.length === 0) this.#drained?.();
  }
}
