import type { ModelConfig, ModelSequenceBatching } from "@galley/proto";
import { type Clock, systemClock } from "../../base/clock.js";
import { backendError, InferenceError, requestId } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { ModelStatistics } from "../../base/statistics.js";
import type { Tensor } from "../../base/tensor.js";
import type { InstancePool } from "../instance-pool.js";
import { batchCompatible, type ScheduledResult, type Scheduler } from "../scheduler.js";
import { DirectStrategy } from "./direct-strategy.js";
import { IdleReaper } from "./idle-reaper.js";
import { ImplicitState } from "./implicit-state.js";
import { OldestStrategy } from "./oldest-strategy.js";
import { type Pending, type Sequence, type Slot, sequenceKey } from "./sequence.js";
import { type CorrelationId, hasCorrelationControl, usesStringIds } from "./sequence-controls.js";
import type { SequenceStrategy } from "./sequence-strategy.js";

/** Options for {@link SequenceBatcher}. */
export interface SequenceBatcherOptions {
  pool: InstancePool;
  config: ModelConfig;
  stats: ModelStatistics;
  log: Logger;
  clock?: Clock;
  /** Each state input's `initial_state` value, as read at load (see `loadInitialStates`); zeros otherwise. */
  initialStates?: ReadonlyMap<string, Tensor>;
}

/**
 * Triton's sequence batcher (PROTOCOL.md §3.7, §9.2): requests carry a correlation id
 * (`sequence_id`, integer or string) and START/END flags. A sequence is bound to one instance
 * from its START to its END; its requests run one at a time, in order; requests of different
 * sequences bound to the same instance share a batch (up to `max_batch_size`, equal shapes), as
 * the `direct` or `oldest` strategy fills it. A new sequence with no free slot waits in a backlog
 * until one ends. Cancelling a queued request cancels every queued request of its sequence and
 * ends it. The batcher adds the configured control inputs (START, END, READY, CORRID) and carries
 * implicit state (`state`) from one request of a sequence to the next. A sequence idle for
 * `max_sequence_idle_microseconds` is released.
 */
export class SequenceBatcher implements Scheduler {
  readonly #config: ModelConfig;
  readonly #batching: ModelSequenceBatching;
  readonly #strategy: SequenceStrategy;
  readonly #state: ImplicitState;
  readonly #reaper: IdleReaper;
  readonly #pool: InstancePool;
  readonly #slots: Slot[];
  readonly #sequences = new Map<string, Sequence>();
  /** Sequences waiting for a free slot, oldest first. */
  readonly #backlog: Sequence[] = [];
  readonly #capacity: number;
  /** Inputs with `allow_ragged_batch`: their shapes need not match within a batch. */
  readonly #ragged: ReadonlySet<string>;
  #delayTimer: unknown;
  readonly #stats: ModelStatistics;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #stringIds: boolean;
  readonly #typedIds: boolean;
  #running = 0;
  #draining = false;
  #drained?: () => void;

  constructor(options: SequenceBatcherOptions) {
    this.#config = options.config;
    if (options.config.schedulingChoice.case !== "sequenceBatching") throw new Error("not a sequence-batching model");
    this.#batching = options.config.schedulingChoice.value;
    this.#strategy = sequenceStrategy(this.#config, this.#batching);
    this.#state = new ImplicitState(this.#config, this.#batching, options.initialStates ?? new Map());
    this.#pool = options.pool;
    this.#slots = options.pool.instances.map((instance) => ({ instance, positions: [] }));
    this.#stats = options.stats;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    this.#reaper = new IdleReaper(this.#clock, this.#batching.maxSequenceIdleMicroseconds, (sequence) => {
      this.#log.verbose(1, `model '${this.#config.name}': sequence ${String(sequence.id)} released after idling`);
      this.#release(sequence);
    });
    this.#capacity = this.#strategy.slotsPerInstance(this.#slots.length);
    this.#ragged = new Set(options.config.input.filter((i) => i.allowRaggedBatch).map((i) => i.name));
    this.#stringIds = usesStringIds(this.#batching);
    this.#typedIds = hasCorrelationControl(this.#batching);
  }

  enqueue(request: InferenceRequest, batchSize: number): Promise<ScheduledResult> {
    return new Promise((resolve, reject) => {
      const model = this.#config.name;
      const raw = request.parameters.sequence_id;
      const id: CorrelationId | undefined =
        typeof raw === "string" ? raw : raw === undefined || raw === false || raw === true ? undefined : BigInt(raw);
      if (id === undefined || id === 0n || id === "") {
        reject(new InferenceError("SEQUENCE_ID_REQUIRED", { model }));
        return;
      }
      if (this.#typedIds && (typeof id === "string") !== this.#stringIds) {
        reject(new InferenceError("SEQUENCE_ID_TYPE", { model, expected: this.#stringIds ? "string" : "integer" }));
        return;
      }
      if (batchSize !== 1) {
        reject(new InferenceError("SEQUENCE_BATCH_SIZE", { model }));
        return;
      }
      const start = request.parameters.sequence_start === true;
      const end = request.parameters.sequence_end === true;
      const key = sequenceKey(id);
      let sequence = this.#sequences.get(key);
      if (!sequence && !start) {
        reject(new InferenceError("SEQUENCE_START_REQUIRED", { id: String(id), model }));
        return;
      }
      const now = this.#clock.now();
      if (!sequence) {
        sequence = { id, instance: undefined, position: -1, queue: [], busy: false, lastNs: now, state: new Map() };
        const slot = this.#openSlot();
        if (slot) this.#bind(sequence, slot);
        else {
          this.#backlog.push(sequence);
          this.#log.verbose(
            1,
            `model '${model}': sequence ${String(id)} waits for a free slot (backlog ${this.#backlog.length})`,
          );
        }
        this.#sequences.set(key, sequence);
      } else if (start) {
        this.#log.verbose(1, `model '${model}': sequence ${String(id)} restarted by a new START`);
      }
      sequence.lastNs = now;
      const pending: Pending = { request, start, end, enqueuedNs: now, resolve, reject };
      const signal = request.signal;
      if (signal?.aborted) {
        reject(new InferenceError("CANCELLED", { id: requestId(request.id) }));
        return;
      }
      if (signal) {
        // Through a local: a function literal assigned to a property is made in the old
        // generation and keeps the request from young collections (development.md).
        const onAbort = () => this.#cancel(sequence as Sequence, pending);
        pending.onAbort = onAbort;
        signal.addEventListener("abort", onAbort, { once: true });
      }
      sequence.queue.push(pending);
      this.#stats.pending++;
      this.#schedule();
    });
  }

  drain(): Promise<void> {
    this.#draining = true;
    return new Promise((resolve) => {
      this.#drained = resolve;
      this.#checkDrained();
    });
  }

  /** The least-loaded instance with a free slot, if any. */
  #openSlot(): Slot | undefined {
    const load = (slot: Slot) => slot.positions.filter(Boolean).length;
    return [...this.#slots].filter((s) => load(s) < this.#capacity).sort((a, b) => load(a) - load(b))[0];
  }

  /** Give a sequence the lowest free position of an instance with room. */
  #bind(sequence: Sequence, slot: Slot): void {
    let position = slot.positions.indexOf(undefined);
    if (position === -1) position = slot.positions.length;
    slot.positions[position] = sequence;
    sequence.instance = slot;
    sequence.position = position;
  }

  /**
   * A request of a sequence was cancelled: every request of that sequence still queued is
   * cancelled with it, and the sequence ends (as in Triton).
   */
  #cancel(sequence: Sequence, cancelled: Pending): void {
    if (!sequence.queue.includes(cancelled)) return;
    for (const pending of sequence.queue.splice(0)) {
      this.#stats.pending--;
      if (pending.onAbort) pending.request.signal?.removeEventListener("abort", pending.onAbort);
      pending.reject(new InferenceError("CANCELLED", { id: requestId(pending.request.id) }));
    }
    // Forgotten at once, so that the id can start again; the slot frees when its execution ends.
    this.#sequences.delete(sequenceKey(sequence.id));
    if (sequence.busy) sequence.cancelled = true;
    else this.#freeSlot(sequence);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#delayTimer !== undefined) this.#clock.clearTimer(this.#delayTimer);
    this.#delayTimer = undefined;
    const max = Math.max(1, this.#config.maxBatchSize);
    const now = this.#clock.now();
    const delayNs = this.#strategy.delayNs;
    let wakeAt: bigint | undefined;
    for (const slot of this.#slots) {
      if (!this.#pool.isIdle(slot.instance)) continue;
      const waiting = slot.positions.filter((q): q is Sequence => q !== undefined && !q.busy && q.queue.length > 0);
      if (waiting.length === 0) continue;
      this.#strategy.order(waiting);
      // Only requests whose shapes can be concatenated with the first one's share its batch.
      const first = waiting[0]?.queue[0]?.request as InferenceRequest;
      const ready = waiting
        .filter((q) => batchCompatible(first, (q.queue[0] as Pending).request, this.#ragged))
        .slice(0, max);
      let oldest = now;
      for (const q of ready) {
        const enqueued = q.queue[0]?.enqueuedNs ?? now;
        if (enqueued < oldest) oldest = enqueued;
      }
      const due = oldest + delayNs;
      const short = this.#strategy.short(ready.length, max);
      if (delayNs > 0n && short && due > now && !this.#draining) {
        if (wakeAt === undefined || due < wakeAt) wakeAt = due;
        continue;
      }
      this.#run(slot, ready, this.#strategy.reason(ready.length, max, short));
    }
    if (wakeAt !== undefined) {
      this.#delayTimer = this.#clock.setTimer(
        () => {
          this.#delayTimer = undefined;
          this.#schedule();
        },
        Number(wakeAt - now) / 1e6,
      );
    }
    this.#reaper.reap(() => this.#sequences.values());
    this.#checkDrained();
  }

  async #run(slot: Slot, sequences: Sequence[], reason: string): Promise<void> {
    this.#pool.take(slot.instance);
    this.#running++;
    const started = this.#clock.now();
    const batched = this.#config.maxBatchSize > 0;
    const items = sequences.map((sequence) => {
      sequence.busy = true;
      const pending = sequence.queue.shift() as Pending;
      this.#stats.pending--;
      if (pending.onAbort) pending.request.signal?.removeEventListener("abort", pending.onAbort);
      if (pending.start) sequence.state = this.#state.initial(batched);
      const signals = { start: pending.start, end: pending.end, ready: true, correlationId: sequence.id };
      return { sequence, pending, request: this.#state.request(pending.request, signals, sequence.state) };
    });
    const { requests, at } = this.#strategy.layout(items);
    this.#log.verbose(
      1,
      `model '${this.#config.name}': sequence batch of size ${requests.length} (${items.length} request(s), ${requests.length - items.length} null) sent to ${slot.instance.name}: ${reason}`,
    );
    try {
      const result = await this.#pool.execute(slot.instance, requests);
      // Null requests are padding: the statistics count the sequences' requests only.
      this.#stats.recordExecution(
        items.length,
        items.length,
        result.computeInputNs,
        result.computeInferNs,
        result.computeOutputNs,
      );
      items.forEach(({ sequence, pending }, i) => {
        const outcome = result.responses[at[i] ?? i];
        if (outcome === undefined || outcome instanceof Error) {
          pending.reject(outcome === undefined ? new InferenceError("BACKEND_NO_RESPONSE") : backendError(outcome));
          return;
        }
        const visible = this.#state.update(sequence.state, outcome, pending.request);
        const parameters = result.parameters?.[at[i] ?? i];
        pending.resolve({
          outputs: visible,
          queueNs: started - pending.enqueuedNs,
          ...(parameters ? { parameters } : {}),
        });
      });
    } catch (error) {
      const failure = backendError(error);
      for (const { pending } of items) pending.reject(failure);
    } finally {
      for (const { sequence, pending } of items) {
        sequence.busy = false;
        sequence.lastNs = this.#clock.now();
        if (sequence.cancelled) this.#freeSlot(sequence);
        else if (pending.end && sequence.queue.length === 0) this.#release(sequence);
      }
      this.#pool.give(slot.instance);
      this.#running--;
      this.#schedule();
    }
  }

  /** A sequence ended (END, idle expiry, cancellation): its slot goes to the oldest sequence in the backlog. */
  #release(sequence: Sequence): void {
    const key = sequenceKey(sequence.id);
    if (this.#sequences.get(key) !== sequence) return;
    this.#sequences.delete(key);
    this.#freeSlot(sequence);
  }

  /** Give a finished sequence's slot (or its backlog place) up. */
  #freeSlot(sequence: Sequence): void {
    const waiting = this.#backlog.indexOf(sequence);
    if (waiting !== -1) this.#backlog.splice(waiting, 1);
    const slot = sequence.instance;
    if (!slot) return;
    sequence.instance = undefined;
    slot.positions[sequence.position] = undefined;
    while (slot.positions.length > 0 && slot.positions.at(-1) === undefined) slot.positions.pop();
    const next = this.#backlog.shift();
    if (next) this.#bind(next, slot);
  }

  #checkDrained(): void {
    const waiting = [...this.#sequences.values()].some((s) => s.queue.length > 0);
    if (this.#draining && this.#running === 0 && !waiting) {
      this.#reaper.stop();
      if (this.#delayTimer !== undefined) this.#clock.clearTimer(this.#delayTimer);
      this.#drained?.();
    }
  }
}

/** The strategy a sequence-batching config names. */
export function sequenceStrategy(config: ModelConfig, batching: ModelSequenceBatching): SequenceStrategy {
  return batching.strategyChoice.case === "oldest"
    ? new OldestStrategy(config, batching.strategyChoice.value)
    : new DirectStrategy(config, batching);
}
