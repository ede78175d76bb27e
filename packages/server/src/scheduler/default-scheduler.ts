import type { BackendInstance } from "../backend/backend.js";
import { type Clock, onceThisTurn, systemClock } from "../base/clock.js";
import { backendError, InferenceError, requestId } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { ModelStatistics } from "../base/statistics.js";
import { BatchMemory } from "./batch-memory.js";
import type { AdmittedBatch, GpuMemoryAdmission } from "./gpu-memory-admission.js";
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
 *
 * With GPU-memory admission, a request for an instance on a GPU starts only when its working memory
 * fits (see `GpuMemoryAdmission`); the queue's head waits for room up to `--gpu-memory-wait-secs`,
 * then gets UNAVAILABLE.
 */
export class DefaultScheduler implements Scheduler {
  readonly #pool: InstancePool;
  readonly #queue: Pending[] = [];
  readonly #stats: ModelStatistics;
  #running = 0;
  #draining = false;
  #drained?: () => void;
  readonly #clock: Clock;
  readonly #memory: BatchMemory;
  readonly #admission: GpuMemoryAdmission | undefined;
  #unsubscribe: (() => void) | undefined;
  /** While the queue's head waits for GPU memory: the timer that ends its wait. */
  #short: { timer: unknown } | undefined;

  /**
   * `memory` records each request's GPU working memory (where the backend measures it); with
   * `admission`, requests for a GPU instance start only when that fits.
   */
  constructor(
    pool: InstancePool,
    stats: ModelStatistics,
    memory: BatchMemory = new BatchMemory(),
    admission?: GpuMemoryAdmission,
    clock: Clock = systemClock,
  ) {
    this.#pool = pool;
    this.#stats = stats;
    this.#clock = clock;
    this.#memory = memory;
    this.#admission = admission;
    this.#dispatchSoon = onceThisTurn(clock, () => this.#dispatch());
    this.#unsubscribe = admission?.onRoom(this.#dispatchSoon);
  }

  enqueue(request: InferenceRequest, batchSize: number): Promise<ScheduledResult> {
    return new Promise((resolve, reject) => {
      const pending: Pending = { request, batchSize, enqueuedNs: this.#clock.now(), resolve, reject };
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
          if (at === 0 && this.#short) {
            // The head that waited for GPU memory left: the next one waits its own time.
            this.#clock.clearTimer(this.#short.timer);
            this.#short = undefined;
            this.#dispatchSoon();
          }
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

  readonly #dispatchSoon: () => void;

  #dispatch(): void {
    while (this.#pool.hasIdle && this.#queue.length > 0) {
      const head = this.#queue[0] as Pending;
      const admitted = this.#admit(head);
      if (admitted === "wait") break;
      const instance = this.#pool.take() as BackendInstance;
      this.#queue.shift();
      this.#stats.pending--;
      if (head.onAbort) head.request.signal?.removeEventListener("abort", head.onAbort);
      this.#run(instance, head, admitted);
    }
  }

  /** With admission and the next instance on a GPU: the head's reservation, or "wait" (a timer ends the wait). */
  #admit(head: Pending): AdmittedBatch | "wait" | undefined {
    const device = this.#admission ? this.#pool.peek()?.device : undefined;
    if (!this.#admission || device === undefined) return undefined;
    const batch = this.#admission.admit(device, this.#memory, [head.batchSize]);
    if (batch) {
      if (this.#short) this.#clock.clearTimer(this.#short.timer);
      this.#short = undefined;
      return batch;
    }
    if (!this.#short) {
      this.#stats.memoryAdmission.delayed++;
      const waitMs = Number(this.#admission.waitNs) / 1e6;
      const timer = this.#clock.setTimer(() => this.#giveUp(device), waitMs);
      this.#short = { timer };
    }
    return "wait";
  }

  /** The head waited `--gpu-memory-wait-secs` for room: it gets UNAVAILABLE, the next one waits anew. */
  #giveUp(device: number): void {
    this.#short = undefined;
    const head = this.#queue.shift();
    if (!head) return;
    this.#stats.pending--;
    this.#stats.memoryAdmission.refused++;
    if (head.onAbort) head.request.signal?.removeEventListener("abort", head.onAbort);
    head.reject(new InferenceError("GPU_MEMORY_SHORT", { device: String(device) }));
    this.#dispatch();
    this.#checkDrained();
  }

  async #run(instance: BackendInstance, pending: Pending, admitted?: AdmittedBatch): Promise<void> {
    this.#running++;
    const queueNs = this.#clock.now() - pending.enqueuedNs;
    try {
      const result = await this.#pool.execute(instance, [pending.request]);
      if (result.peakWorkingBytes !== undefined) this.#memory.record(pending.batchSize, result.peakWorkingBytes);
      this.#stats.recordExecution(
        pending.batchSize,
        1,
        result.computeInputNs,
        result.computeInferNs,
        result.computeOutputNs,
        instance.device,
      );
      const outcome = result.responses[0];
      if (outcome === undefined) throw new InferenceError("BACKEND_NO_RESPONSE");
      if (outcome instanceof Error) throw backendError(outcome);
      const parameters = result.parameters?.[0];
      pending.resolve({ outputs: outcome, queueNs, ...(parameters ? { parameters } : {}) });
    } catch (error) {
      pending.reject(backendError(error));
    } finally {
      admitted?.release();
      this.#running--;
      this.#pool.give(instance);
      this.#dispatch();
      this.#checkDrained();
    }
  }

  #checkDrained(): void {
    if (this.#draining && this.#running === 0 && this.#queue.length === 0) {
      this.#unsubscribe?.();
      this.#unsubscribe = undefined;
      this.#drained?.();
    }
  }
}
