import type { ModelConfig, ModelDynamicBatching } from "@galley/proto";
import type { BackendInstance } from "../backend/backend.js";
import { booleanParameter } from "../backend/instance-specs.js";
import { type Clock, onceThisTurn, systemClock } from "../base/clock.js";
import { backendError, InferenceError, requestId } from "../base/errors.js";
import { batchCompatible, type InferenceRequest } from "../base/inference-request.js";
import type { Logger } from "../base/log.js";
import type { ModelStatistics } from "../base/statistics.js";
import { BatchMemory } from "./batch-memory.js";
import type { AdmittedBatch, GpuMemoryAdmission } from "./gpu-memory-admission.js";
import type { InstancePool } from "./instance-pool.js";
import { PriorityQueue, type Queued } from "./priority-queue.js";
import type { ScheduledResult, Scheduler } from "./scheduler.js";

/** Why a batch was sent, as the verbose log line says. */
export type BatchReason =
  | "filled"
  | "preferred size reached"
  | "delay expired"
  | "no delay"
  | "shape boundary"
  | "waiting has not paid off"
  | "arrivals stopped";

/** Waits remembered to judge whether waiting pays off, and how many sends pass before a wait is tried anyway. */
export const WAIT_HISTORY = 8;
/** Gaps between a waiting batch's arrivals remembered to tell when arrivals have stopped. */
export const JOIN_GAP_HISTORY = 32;
/** A waiting batch goes once no request arrived for this many times the largest remembered gap... */
export const QUIET_GAPS = 2;
/** ...and at least this long (ns). */
export const QUIET_FLOOR_NS = 100_000n;
/** One wait in this many ignores the quiet rule and waits the whole delay, to learn longer gaps. */
export const QUIET_PROBE_EVERY = 16;
/** Each probe that gains nothing doubles the sends before the next one, up to WAIT_HISTORY × 2^this. */
export const PROBE_BACKOFF_STEPS = 5;

/** One batch the batcher sent (for logs, metrics and tests). */
export interface BatchEvent {
  size: number;
  requests: number;
  reason: BatchReason;
}

interface Pending extends Queued {
  request: InferenceRequest;
  batchSize: number;
  level: number;
  sequence: number;
  resolve(result: ScheduledResult): void;
  reject(error: InferenceError): void;
  onAbort?: () => void;
}

/** Options for {@link DynamicBatcher}. */
export interface DynamicBatcherOptions {
  pool: InstancePool;
  config: ModelConfig;
  stats: ModelStatistics;
  log: Logger;
  clock?: Clock;
  /** Called once per batch sent (the batch-size histogram listens here). */
  onBatch?: (event: BatchEvent) => void;
  /** Where each batch's GPU working memory is recorded (by batch size), where the backend measures it. */
  memory?: BatchMemory;
  /**
   * GPU-memory admission (`--gpu-memory-admission`): a batch for an instance on a GPU starts only
   * when its estimated working memory (from `memory`) fits.
   */
  admission?: GpuMemoryAdmission;
}

/**
 * Triton's dynamic batcher (PROTOCOL.md §3.6): requests wait in a priority queue (levels, queue
 * policies, timeouts, `max_queue_size`) and are merged into batches of up to `max_batch_size`,
 * preferring `preferred_batch_size`, waiting at most `max_queue_delay_microseconds` for a batch
 * to fill. Requests merge only when their non-batch shapes are equal (unless the input allows
 * ragged batches). One timer drives every wait; nothing polls. Beyond Triton, waits that do not
 * pay are cut short (a lone client, a burst of arrivals that is over); the model parameter
 * `adaptive_queue_delay: "false"` waits out the delay every time, as Triton does.
 * @throws Error when `adaptive_queue_delay` is neither true nor false.
 */
export class DynamicBatcher implements Scheduler {
  readonly #pool: InstancePool;
  readonly #queue: PriorityQueue<Pending>;
  readonly #config: ModelConfig;
  readonly #batching: ModelDynamicBatching | undefined;
  readonly #stats: ModelStatistics;
  readonly #log: Logger;
  readonly #clock: Clock;
  /**
   * Decide at the end of this event-loop turn rather than on each arrival: requests whose
   * sockets were read in the same turn are batched together even when nothing waits (no delay,
   * or waiting has not paid off), and the queue is looked at once per turn, not once per request.
   */
  readonly #scheduleSoon: () => void;
  readonly #onBatch?: (event: BatchEvent) => void;
  readonly #memory: BatchMemory;
  readonly #admission?: GpuMemoryAdmission;
  #unsubscribe: (() => void) | undefined;
  /** The request at the head of the batch waiting for GPU memory, and since when it waits (undefined: none waits). */
  #short: { head: Pending; since: bigint } | undefined;
  readonly #preferred: number[];
  readonly #delayNs: bigint;
  readonly #ragged: Set<string>;
  /** `adaptive_queue_delay` (default true): end waits that do not pay; false waits as Triton does. */
  readonly #adaptive: boolean;
  #timer: unknown;
  #timerAt?: bigint;
  #running = 0;
  #sequence = 0;
  /** The batch now waiting out the delay: its oldest request and how many requests it had then. */
  #waiting: { oldest: Pending; requests: number } | undefined;
  /** The oldest request of the batch whose wait was started last (to count each wait once). */
  #waitingFor: Pending | undefined;
  /** Of the last waits, whether any request joined the batch while it waited. */
  readonly #waits: boolean[] = [];
  #skipped = 0;
  /** Probes in a row (waits made while waiting had not paid off) that gained nothing. */
  #fruitlessProbes = 0;
  /** When the newest request arrived, and the gaps before the last arrivals that joined a waiting batch (ns). */
  #lastArrivalNs: bigint | undefined;
  readonly #joinGaps: bigint[] = [];
  /** Waits started, and whether the current one waits the whole delay (a probe of the quiet rule). */
  #waitStarts = 0;
  #fullWait = false;
  #draining = false;
  #drained?: () => void;
  // preserve_ordering: results wait here until every earlier request has been answered.
  #nextToDeliver = 0;
  readonly #held = new Map<number, () => void>();

  constructor(options: DynamicBatcherOptions) {
    this.#pool = options.pool;
    this.#config = options.config;
    this.#batching =
      options.config.schedulingChoice.case === "dynamicBatching" ? options.config.schedulingChoice.value : undefined;
    this.#queue = new PriorityQueue(this.#batching);
    this.#stats = options.stats;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    this.#scheduleSoon = onceThisTurn(this.#clock, () => this.#schedule());
    if (options.onBatch) this.#onBatch = options.onBatch;
    this.#preferred = [...(this.#batching?.preferredBatchSize ?? [])].sort((a, b) => a - b);
    this.#delayNs = (this.#batching?.maxQueueDelayMicroseconds ?? 0n) * 1000n;
    this.#ragged = new Set(options.config.input.filter((i) => i.allowRaggedBatch).map((i) => i.name));
    this.#adaptive = booleanParameter(options.config, "adaptive_queue_delay") ?? true;
    this.#memory = options.memory ?? new BatchMemory();
    if (options.admission) {
      this.#admission = options.admission;
      this.#unsubscribe = options.admission.onRoom(this.#scheduleSoon);
    }
  }

  enqueue(request: InferenceRequest, batchSize: number): Promise<ScheduledResult> {
    return new Promise((resolve, reject) => {
      const id = requestId(request.id);
      if (request.signal?.aborted) {
        reject(new InferenceError("CANCELLED", { id }));
        return;
      }
      const level = this.#queue.levelOf(numberParameter(request, "priority"));
      if (this.#queue.full(level)) {
        // Counted (REJECTED) by the core's request pipeline, as every failure.
        reject(new InferenceError("QUEUE_FULL"));
        return;
      }
      const now = this.#clock.now();
      const timeout = numberParameter(request, "timeout");
      const deadlineNs = this.#queue.deadline(level, now, timeout === undefined ? undefined : BigInt(timeout) * 1000n);
      const pending: Pending = {
        request,
        batchSize,
        level,
        enqueuedNs: now,
        ...(deadlineNs !== undefined ? { deadlineNs } : {}),
        sequence: this.#sequence++,
        resolve,
        reject,
      };
      if (request.signal) {
        // Through a local: a function literal assigned to a property is made in the old
        // generation and keeps the request from young collections (development.md).
        const onAbort = () => {
          this.#queue.remove(new Set([pending]));
          this.#stats.pending--;
          this.#settle(pending, () => reject(new InferenceError("CANCELLED", { id })));
          this.#checkDrained();
        };
        pending.onAbort = onAbort;
        request.signal.addEventListener("abort", onAbort, { once: true });
      }
      if (this.#waiting && this.#lastArrivalNs !== undefined) {
        this.#joinGaps.push(now - this.#lastArrivalNs);
        if (this.#joinGaps.length > JOIN_GAP_HISTORY) this.#joinGaps.shift();
      }
      this.#lastArrivalNs = now;
      this.#queue.push(level, pending);
      this.#stats.pending++;
      this.#scheduleSoon();
    });
  }

  drain(): Promise<void> {
    this.#draining = true;
    return new Promise((resolve) => {
      this.#drained = resolve;
      this.#schedule();
    });
  }

  /** Send every batch that is due, and set the timer for the next decision. */
  #schedule(): void {
    const now = this.#clock.now();
    for (const expired of this.#queue.expire(now)) {
      this.#stats.pending--;
      this.#detach(expired);
      this.#settle(expired, () => expired.reject(new InferenceError("QUEUE_TIMEOUT")));
    }
    while (this.#pool.hasIdle && this.#queue.size > 0) {
      const batch = this.#nextBatch(now);
      if (!batch) break;
      const admitted = this.#admit(batch.items, now);
      if (admitted === "wait") break;
      if (admitted === "failed") continue;
      this.#send(admitted ? batch.items.slice(0, admitted.count) : batch.items, batch.reason, admitted?.batch);
    }
    this.#setTimer(now);
    this.#checkDrained();
  }

  /** The batch to send now, or undefined when it is worth waiting for more requests. */
  #nextBatch(now: bigint): { items: Pending[]; reason: BatchReason } | undefined {
    const max = Math.max(1, this.#config.maxBatchSize);
    const items: Pending[] = [];
    let size = 0;
    let boundary = false;
    for (const item of this.#queue.ordered()) {
      const first = items[0];
      if (first && !batchCompatible(first.request, item.request, this.#ragged)) {
        boundary = true;
        break;
      }
      if (size + item.batchSize > max) break;
      items.push(item);
      size += item.batchSize;
      if (size === max) break;
    }
    const oldest = items[0];
    if (!oldest) return undefined;
    this.#judgeWait(oldest, items.length);
    if (size === max) return { items, reason: "filled" };
    if (this.#preferred.includes(size) && size === this.#largestPreferred())
      return { items, reason: "preferred size reached" };
    if (boundary) return { items, reason: "shape boundary" };
    const waited = now - oldest.enqueuedNs;
    const stopped = this.#arrivalsStopped(now);
    // While draining, nothing more will come: send without waiting out the delay.
    if (this.#delayNs === 0n || waited >= this.#delayNs || this.#draining || stopped) {
      // Delay over: the largest preferred size a prefix reaches, else everything gathered.
      let prefix = items.length;
      if (this.#preferred.length > 0 && !this.#preferred.includes(size)) {
        let running = 0;
        for (let i = 0; i < items.length; i++) {
          running += items[i]?.batchSize ?? 0;
          if (this.#preferred.includes(running)) prefix = i + 1;
        }
      }
      const early = stopped && waited < this.#delayNs && !this.#draining;
      const reason = this.#delayNs === 0n ? "no delay" : early ? "arrivals stopped" : "delay expired";
      return { items: items.slice(0, prefix), reason };
    }
    if (this.#waiting?.oldest !== oldest && this.#waitingPointless()) {
      return { items, reason: "waiting has not paid off" };
    }
    if (!this.#waiting) {
      if (this.#waitingFor !== oldest) {
        this.#waitingFor = oldest;
        this.#fullWait = this.#waitStarts++ % QUIET_PROBE_EVERY === 0;
      }
      this.#waiting = { oldest, requests: items.length };
    }
    return undefined;
  }

  /**
   * How long after the newest arrival a waiting batch stops waiting: {@link QUIET_GAPS} times the
   * largest of the last {@link JOIN_GAP_HISTORY} gaps between requests that joined a waiting batch
   * (at least {@link QUIET_FLOOR_NS}); undefined until enough gaps are known, and during a wait
   * that probes the whole delay. Requests that come in bursts (users of a pipeline in lockstep,
   * the calls one batch's callers make next) then wait for their burst, not for the delay: under
   * random arrivals a silence twice the largest of 32 gaps means the next one is unlikely soon.
   */
  #quietNs(): bigint | undefined {
    if (!this.#adaptive || this.#fullWait || this.#joinGaps.length < WAIT_HISTORY) return undefined;
    let largest = 0n;
    for (const gap of this.#joinGaps) if (gap > largest) largest = gap;
    const quiet = largest * BigInt(QUIET_GAPS);
    return quiet > QUIET_FLOOR_NS ? quiet : QUIET_FLOOR_NS;
  }

  #arrivalsStopped(now: bigint): boolean {
    const quiet = this.#quietNs();
    return quiet !== undefined && this.#lastArrivalNs !== undefined && now - this.#lastArrivalNs >= quiet;
  }

  /**
   * A batch that waited is being looked at again: once it goes (or its oldest request is gone),
   * remember whether anyone joined it meanwhile.
   */
  #judgeWait(oldest: Pending, requests: number): void {
    const waiting = this.#waiting;
    if (!waiting) return;
    const now = this.#clock.now();
    if (
      waiting.oldest === oldest &&
      requests === waiting.requests &&
      now - oldest.enqueuedNs < this.#delayNs &&
      !this.#arrivalsStopped(now)
    )
      return; // still waiting, nobody new yet
    this.#waiting = undefined;
    const joined = waiting.oldest !== oldest || requests > waiting.requests;
    if (joined) this.#fruitlessProbes = 0;
    else if (this.#waits.length >= WAIT_HISTORY && !this.#waits.some((j) => j)) this.#fruitlessProbes++;
    this.#waits.push(joined);
    if (this.#waits.length > WAIT_HISTORY) this.#waits.shift();
  }

  /**
   * Whether to send at once instead of waiting out \`max_queue_delay_microseconds\`: when none of
   * the last {@link WAIT_HISTORY} waits gained a request (one client at a time, say), waiting only
   * adds the delay to every request. The delay is a maximum, so sending earlier keeps its meaning.
   * A wait is still tried after {@link WAIT_HISTORY} such sends, then after twice as many each time
   * a try gains nothing (up to 2^{@link PROBE_BACKOFF_STEPS} times as many), so that a lone client
   * pays the delay on one request in 256 rather than one in 8. Batching resumes at the first try
   * that gains a request; requests that meet while the instances are busy batch without any wait.
   */
  #waitingPointless(): boolean {
    if (!this.#adaptive) return false;
    if (this.#waits.length < WAIT_HISTORY || this.#waits.some((joined) => joined)) {
      this.#skipped = 0;
      return false;
    }
    this.#skipped++;
    if (this.#skipped < WAIT_HISTORY << Math.min(this.#fruitlessProbes, PROBE_BACKOFF_STEPS)) return true;
    this.#skipped = 0;
    return false;
  }

  /**
   * With GPU-memory admission and the next instance on a GPU: how many of `items` fit in memory
   * now (a prefix, so a smaller batch may go), or "wait" (nothing fits; the admission calls back
   * when it read the GPU again), or "failed" once the head of the queue waited longer than
   * `--gpu-memory-wait-secs` (its requests got UNAVAILABLE). Undefined: no admission applies.
   */
  #admit(items: Pending[], now: bigint): { count: number; batch: AdmittedBatch } | "wait" | "failed" | undefined {
    const device = this.#admission ? this.#pool.peek()?.device : undefined;
    if (!this.#admission || device === undefined) return undefined;
    const sizes: number[] = [];
    let total = 0;
    for (const item of items) {
      total += item.batchSize;
      sizes.push(total);
    }
    const batch = this.#admission.admit(device, this.#memory, sizes);
    if (batch) {
      this.#short = undefined;
      const count = sizes.indexOf(batch.size) + 1;
      if (count < items.length) this.#stats.memoryAdmission.reduced++;
      return { count, batch };
    }
    // A new head (the old one left: answered, timed out, cancelled) waits its own time.
    const head = items[0] as Pending;
    if (this.#short?.head !== head) {
      this.#short = { head, since: now };
      this.#stats.memoryAdmission.delayed++;
    }
    if (now - this.#short.since < this.#admission.waitNs) return "wait";
    this.#short = undefined;
    this.#stats.memoryAdmission.refused++;
    const error = new InferenceError("GPU_MEMORY_SHORT", { device: String(device) });
    this.#queue.remove(new Set(items));
    for (const item of items) {
      this.#stats.pending--;
      this.#detach(item);
      this.#settle(item, () => item.reject(error));
    }
    return "failed";
  }

  #largestPreferred(): number | undefined {
    return this.#preferred[this.#preferred.length - 1];
  }

  #send(items: Pending[], reason: BatchReason, admitted?: AdmittedBatch): void {
    const instance = this.#pool.take() as BackendInstance;
    this.#queue.remove(new Set(items));
    for (const item of items) {
      this.#stats.pending--;
      this.#detach(item);
    }
    const size = items.reduce((n, i) => n + i.batchSize, 0);
    this.#log.verbose(
      1,
      `model '${this.#config.name}': batch of size ${size} (${items.length} request(s)) sent: ${reason}`,
    );
    this.#onBatch?.({ size, requests: items.length, reason });
    this.#run(instance, items, size, admitted);
  }

  async #run(instance: BackendInstance, items: Pending[], size: number, admitted?: AdmittedBatch): Promise<void> {
    this.#running++;
    const started = this.#clock.now();
    try {
      const result = await this.#pool.execute(
        instance,
        items.map((i) => i.request),
      );
      if (result.peakWorkingBytes !== undefined) this.#memory.record(size, result.peakWorkingBytes);
      this.#stats.recordExecution(
        size,
        items.length,
        result.computeInputNs,
        result.computeInferNs,
        result.computeOutputNs,
        instance.device,
      );
      items.forEach((item, i) => {
        const outcome = result.responses[i];
        const queueNs = started - item.enqueuedNs;
        if (outcome === undefined || outcome instanceof Error) {
          const error = outcome === undefined ? new InferenceError("BACKEND_NO_RESPONSE") : backendError(outcome);
          this.#settle(item, () => item.reject(error));
        } else {
          const parameters = result.parameters?.[i];
          this.#settle(item, () => item.resolve({ outputs: outcome, queueNs, ...(parameters ? { parameters } : {}) }));
        }
      });
    } catch (error) {
      const failure = backendError(error);
      for (const item of items) this.#settle(item, () => item.reject(failure));
    } finally {
      admitted?.release();
      this.#running--;
      this.#pool.give(instance);
      this.#schedule();
    }
  }

  /** Answer a request, in arrival order when `preserve_ordering` is set. */
  #settle(item: Pending, answer: () => void): void {
    if (!this.#batching?.preserveOrdering) {
      answer();
      return;
    }
    this.#held.set(item.sequence, answer);
    for (let next = this.#held.get(this.#nextToDeliver); next; next = this.#held.get(this.#nextToDeliver)) {
      this.#held.delete(this.#nextToDeliver);
      this.#nextToDeliver++;
      next();
    }
  }

  #detach(item: Pending): void {
    if (item.onAbort) item.request.signal?.removeEventListener("abort", item.onAbort);
  }

  /** One timer: at the oldest request's batching deadline or the next request timeout, whichever is first. */
  #setTimer(now: bigint): void {
    let at: bigint | undefined = this.#queue.nextDeadline();
    const memoryDue = this.#short && this.#short.since + (this.#admission?.waitNs ?? 0n);
    if (memoryDue !== undefined && (at === undefined || memoryDue < at)) at = memoryDue;
    if (this.#pool.hasIdle && this.#delayNs > 0n) {
      const oldest = this.#queue.ordered().next().value as Pending | undefined;
      if (oldest) {
        let batchDue = oldest.enqueuedNs + this.#delayNs;
        const quiet = this.#quietNs();
        if (quiet !== undefined && this.#lastArrivalNs !== undefined && this.#lastArrivalNs + quiet < batchDue)
          batchDue = this.#lastArrivalNs + quiet;
        if (at === undefined || batchDue < at) at = batchDue;
      }
    }
    if (at === this.#timerAt) return;
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#timerAt = at;
    if (at === undefined) return;
    const delayMs = Math.max(0, Number(at - now) / 1e6);
    this.#timer = this.#clock.setTimer(() => {
      this.#timer = undefined;
      this.#timerAt = undefined;
      this.#schedule();
    }, delayMs);
  }

  #checkDrained(): void {
    if (this.#draining && this.#running === 0 && this.#queue.size === 0) {
      this.#unsubscribe?.();
      this.#unsubscribe = undefined;
      this.#drained?.();
    }
  }
}

function numberParameter(request: InferenceRequest, key: string): number | undefined {
  const value = request.parameters[key];
  if (value === undefined) return undefined;
  const n = Number(value);
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}
