import type { ModelConfig, ModelSequenceBatching } from "@galley/proto";
import { type Clock, systemClock } from "../../base/clock.js";
import { backendError, InferenceError, requestId } from "../../base/errors.js";
import { batchCompatible, type InferenceRequest } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { ModelStatistics } from "../../base/statistics.js";
import type { Tensor } from "../../base/tensor.js";
import { BatchMemory } from "../batch-memory.js";
import type { AdmittedBatch, GpuMemoryAdmission } from "../gpu-memory-admission.js";
import type { InstancePool } from "../instance-pool.js";
import type { ScheduledResult, Scheduler } from "../scheduler.js";
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
  /** Where each batch's GPU working memory is recorded (by batch size), where the backend measures it. */
  memory?: BatchMemory;
  /**
   * GPU-memory admission (`--gpu-memory-admission`): a batch for an instance on a GPU starts only
   * when its estimated working memory (from `memory`) fits.
   */
  admission?: GpuMemoryAdmission;
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
 *
 * With `iterative_sequence: true` (Triton's iterative sequencer) a request without a correlation
 * id is a sequence of its own: the batcher gives it an id (1, 2, ... as Triton does; kept apart
 * from clients' ids) and START. A model may release a request with
 * TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (`ExecuteResult.rescheduled`): it goes back to the end
 * of its sequence's queue as it came (its inputs, its client, its responder), with neither START
 * nor END, and runs again. A request released otherwise ends its sequence, as though it had END.
 *
 * With GPU-memory admission and an instance on a GPU, a batch starts only when its working memory
 * fits (see `GpuMemoryAdmission`): the largest prefix of the batch that fits goes (the others keep
 * their positions and wait), or the whole batch waits. A request that waited
 * `--gpu-memory-wait-secs` for room gets UNAVAILABLE; its sequence stays open with the state it had
 * before that request (the client may send it again), and no other sequence is touched. A refused
 * START ends the sequence it would have begun (it never began): its queued requests fail with it.
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
  /** `iterative_sequence`: requests without an id get one; executions may reschedule requests. */
  readonly #iterative: boolean;
  /** The last id the batcher gave (iterative). */
  #lastGiven = 0n;
  #running = 0;
  #draining = false;
  #drained?: () => void;
  readonly #memory: BatchMemory;
  readonly #admission: GpuMemoryAdmission | undefined;
  #unsubscribe: (() => void) | undefined;

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
    this.#iterative = this.#batching.iterativeSequence;
    this.#memory = options.memory ?? new BatchMemory();
    this.#admission = options.admission;
    this.#unsubscribe = options.admission?.onRoom(() => this.#schedule());
  }

  enqueue(request: InferenceRequest, batchSize: number): Promise<ScheduledResult> {
    return new Promise((resolve, reject) => {
      const model = this.#config.name;
      const raw = request.parameters.sequence_id;
      let id: CorrelationId | undefined =
        typeof raw === "string" ? raw : raw === undefined || raw === false || raw === true ? undefined : BigInt(raw);
      let start = request.parameters.sequence_start === true;
      let key: string;
      if (id === undefined || id === 0n || id === "") {
        if (!this.#iterative) {
          reject(new InferenceError("SEQUENCE_ID_REQUIRED", { model }));
          return;
        }
        // Triton's iterative sequencer: the request is a sequence of its own, which it starts.
        const given = ++this.#lastGiven;
        id = this.#stringIds ? String(given) : given;
        key = `iterative:${given}`;
        start = true;
      } else if (this.#typedIds && (typeof id === "string") !== this.#stringIds) {
        reject(new InferenceError("SEQUENCE_ID_TYPE", { model, expected: this.#stringIds ? "string" : "integer" }));
        return;
      } else key = sequenceKey(id);
      if (batchSize !== 1) {
        reject(new InferenceError("SEQUENCE_BATCH_SIZE", { model }));
        return;
      }
      const end = request.parameters.sequence_end === true;
      if (request.signal?.aborted) {
        reject(new InferenceError("CANCELLED", { id: requestId(request.id) }));
        return;
      }
      let sequence = this.#sequences.get(key);
      if (!sequence && !start) {
        reject(new InferenceError("SEQUENCE_START_REQUIRED", { id: String(id), model }));
        return;
      }
      const now = this.#clock.now();
      if (!sequence) {
        sequence = {
          id,
          key,
          instance: undefined,
          position: -1,
          queue: [],
          busy: false,
          lastNs: now,
          state: new Map(),
        };
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
      this.#queue(sequence, { request, start, end, enqueuedNs: now, waitedNs: 0n, resolve, reject });
      this.#schedule();
    });
  }

  /** Put a request at the end of its sequence's queue, cancelled with it when its client goes. */
  #queue(sequence: Sequence, pending: Pending): void {
    const signal = pending.request.signal;
    if (signal) {
      // Through a local: a function literal assigned to a property is made in the old
      // generation and keeps the request from young collections (development.md).
      const onAbort = () => this.#cancel(sequence, pending);
      pending.onAbort = onAbort;
      signal.addEventListener("abort", onAbort, { once: true });
    }
    sequence.queue.push(pending);
    this.#stats.pending++;
  }

  /**
   * A request its model released with RESCHEDULE (iterative): back to the end of its sequence's
   * queue, with neither START nor END (Triton's flags 0). A request whose client has gone, or
   * whose sequence was cancelled meanwhile, is cancelled instead; the caller then ends the sequence.
   */
  #reschedule(sequence: Sequence, pending: Pending, startedNs: bigint): boolean {
    const { request } = pending;
    if (request.signal?.aborted || sequence.cancelled || this.#sequences.get(sequence.key) !== sequence) {
      pending.reject(new InferenceError("CANCELLED", { id: requestId(request.id) }));
      return false;
    }
    this.#log.verbose(1, `model '${this.#config.name}': sequence ${String(sequence.id)} rescheduled`);
    const { shortSinceNs: _waitedForMemory, ...again } = pending;
    this.#queue(sequence, {
      ...again,
      start: false,
      end: false,
      waitedNs: pending.waitedNs + (startedNs - pending.enqueuedNs),
      enqueuedNs: this.#clock.now(),
    });
    return true;
  }

  /** Open sequences live between requests: a model that has one is not idle. */
  holding(): boolean {
    return this.#sequences.size > 0;
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
    this.#sequences.delete(sequence.key);
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
      const admitted = this.#admit(slot, ready, now);
      if ("retryAt" in admitted) {
        if (wakeAt === undefined || admitted.retryAt < wakeAt) wakeAt = admitted.retryAt;
        continue;
      }
      const reason = this.#strategy.reason(ready.length, max, short);
      const reduced = admitted.sequences.length < ready.length ? "; reduced to fit GPU memory" : "";
      this.#run(slot, admitted.sequences, reason + reduced, admitted.batch);
    }
    if (wakeAt !== undefined) {
      this.#delayTimer = this.#clock.setTimer(
        () => {
          this.#delayTimer = undefined;
          this.#schedule();
        },
        Math.max(0, Number(wakeAt - now) / 1e6),
      );
    }
    this.#reaper.reap(() => this.#sequences.values());
    this.#checkDrained();
  }

  /**
   * With GPU-memory admission and `slot`'s instance on a GPU: the sequences whose next requests go
   * now (the largest prefix of `ready` whose batch fits) and their reservation; otherwise when to
   * look again (a request's wait ends then; the admission also calls back after each reading).
   * Requests that waited `--gpu-memory-wait-secs` get UNAVAILABLE here.
   */
  #admit(
    slot: Slot,
    ready: Sequence[],
    now: bigint,
  ): { sequences: Sequence[]; batch?: AdmittedBatch } | { retryAt: bigint } {
    const admission = this.#admission;
    const device = slot.instance.device;
    if (!admission || device === undefined) return { sequences: ready };
    const sizes = ready.map((_, i) => this.#strategy.batchSize(ready.slice(0, i + 1)));
    const batch = admission.admit(device, this.#memory, sizes);
    if (batch) {
      const count = sizes.indexOf(batch.size) + 1;
      if (count < ready.length) this.#stats.memoryAdmission.reduced++;
      return { sequences: ready.slice(0, count), batch };
    }
    let waitBegan = false;
    let expired = false;
    let retryAt: bigint | undefined;
    for (const sequence of ready) {
      const head = sequence.queue[0] as Pending;
      if (head.shortSinceNs === undefined) {
        head.shortSinceNs = now;
        waitBegan = true;
      }
      const until = head.shortSinceNs + admission.waitNs;
      if (until > now) {
        if (retryAt === undefined || until < retryAt) retryAt = until;
        continue;
      }
      expired = true;
      this.#refuse(sequence, new InferenceError("GPU_MEMORY_SHORT", { device: String(device) }));
    }
    if (waitBegan) this.#stats.memoryAdmission.delayed++;
    if (expired) {
      this.#stats.memoryAdmission.refused++;
      // What is left (the next requests, a smaller batch) is looked at again at once.
      return { retryAt: now };
    }
    return { retryAt: retryAt ?? now };
  }

  /**
   * A sequence's next request waited too long for GPU memory: it fails and the sequence keeps the
   * state it had. A refused START ends the sequence it would have begun, with every request queued behind it.
   */
  #refuse(sequence: Sequence, error: InferenceError): void {
    const head = sequence.queue[0] as Pending;
    const failing = head.start ? sequence.queue.splice(0) : [sequence.queue.shift() as Pending];
    for (const pending of failing) {
      this.#stats.pending--;
      if (pending.onAbort) pending.request.signal?.removeEventListener("abort", pending.onAbort);
      pending.reject(error);
    }
    if (head.start) this.#release(sequence);
  }

  async #run(slot: Slot, sequences: Sequence[], reason: string, admitted?: AdmittedBatch): Promise<void> {
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
      const request = this.#state.request(pending.request, signals, sequence.state);
      // The model sees the id and flags the batcher gave (a backend reads them from the parameters).
      if (this.#iterative) {
        request.parameters = {
          ...request.parameters,
          sequence_id: sequence.id,
          sequence_start: pending.start,
          sequence_end: pending.end,
        };
        request.iteration = pending.request;
      }
      return { sequence, pending, request, again: false };
    });
    const { requests, at } = this.#strategy.layout(items);
    this.#log.verbose(
      1,
      `model '${this.#config.name}': sequence batch of size ${requests.length} (${items.length} request(s), ${requests.length - items.length} null) sent to ${slot.instance.name}: ${reason}`,
    );
    try {
      const result = await this.#pool.execute(slot.instance, requests);
      if (result.peakWorkingBytes !== undefined) this.#memory.record(requests.length, result.peakWorkingBytes);
      // Null requests are padding: the statistics count the sequences' requests only.
      this.#stats.recordExecution(
        items.length,
        items.length,
        result.computeInputNs,
        result.computeInferNs,
        result.computeOutputNs,
        slot.instance.device,
      );
      const rescheduled = new Set(result.rescheduled);
      items.forEach((item, i) => {
        const { sequence, pending } = item;
        if (rescheduled.has(at[i] ?? i)) {
          if (this.#iterative) item.again = this.#reschedule(sequence, pending, started);
          else pending.reject(new InferenceError("RESCHEDULE_UNSUPPORTED"));
          return;
        }
        const outcome = result.responses[at[i] ?? i];
        if (outcome === undefined || outcome instanceof Error) {
          pending.reject(outcome === undefined ? new InferenceError("BACKEND_NO_RESPONSE") : backendError(outcome));
          return;
        }
        const visible = this.#state.update(sequence.state, outcome, pending.request);
        const parameters = result.parameters?.[at[i] ?? i];
        pending.resolve({
          outputs: visible,
          queueNs: pending.waitedNs + (started - pending.enqueuedNs),
          ...(parameters ? { parameters } : {}),
        });
      });
    } catch (error) {
      const failure = backendError(error);
      for (const { pending } of items) pending.reject(failure);
    } finally {
      for (const { sequence, pending, again } of items) {
        sequence.busy = false;
        sequence.lastNs = this.#clock.now();
        if (sequence.cancelled) this.#freeSlot(sequence);
        // Iterative: a request released without RESCHEDULE ends its sequence (Triton's null END request).
        else if ((pending.end || (this.#iterative && !again)) && sequence.queue.length === 0) this.#release(sequence);
      }
      admitted?.release();
      this.#pool.give(slot.instance);
      this.#running--;
      this.#schedule();
    }
  }

  /** A sequence ended (END, idle expiry, cancellation): its slot goes to the oldest sequence in the backlog. */
  #release(sequence: Sequence): void {
    const key = sequence.key;
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
      this.#unsubscribe?.();
      this.#unsubscribe = undefined;
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
