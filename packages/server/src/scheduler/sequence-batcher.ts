import type { ModelConfig, ModelSequenceBatching } from "@galley/proto";
import type { BackendInstance } from "../backend/backend.js";
import { datatypeOf } from "../core/datatype.js";
import { InferenceError, requestId, toInferenceError } from "../core/errors.js";
import type { InferenceRequest } from "../core/inference-request.js";
import type { ModelStatistics } from "../core/statistics.js";
import { elementCount, encodeBytesElements, type Tensor } from "../core/tensor.js";
import type { Logger } from "../log.js";
import { type Clock, systemClock } from "./clock.js";
import { batchCompatible, type ScheduledResult, type Scheduler } from "./scheduler.js";
import {
  type ControlSignals,
  type CorrelationId,
  controlTensors,
  hasCorrelationControl,
  usesStringIds,
} from "./sequence-controls.js";

interface Pending {
  request: InferenceRequest;
  start: boolean;
  end: boolean;
  enqueuedNs: bigint;
  resolve(result: ScheduledResult): void;
  reject(error: InferenceError): void;
  onAbort?: () => void;
}

interface Sequence {
  id: CorrelationId;
  /** The instance the sequence is bound to; undefined while it waits in the backlog for a slot. */
  instance: Slot | undefined;
  /** Direct strategy: the sequence's position in its instance's batches, fixed from START to END. */
  position: number;
  queue: Pending[];
  busy: boolean;
  lastNs: bigint;
  /** Implicit state: the value of each state input for the next request. */
  state: Map<string, Tensor>;
  /** Cancelled while a request of it was executing: released once that finishes. */
  cancelled?: boolean;
}

interface Slot {
  instance: BackendInstance;
  busy: boolean;
  /** The sequences bound to the instance, by position (direct); the first free entries (oldest). */
  positions: (Sequence | undefined)[];
}

/** A sequence's map key: integer and string ids never share one, even with equal text. */
function sequenceKey(id: CorrelationId): string {
  return `${typeof id}:${String(id)}`;
}

/**
 * Sequences one instance holds at once: `max_batch_size` slots (at least one) with the direct
 * strategy; with oldest, `max_candidate_sequences` spread over the instances.
 */
function slotsPerInstance(config: ModelConfig, batching: ModelSequenceBatching, instances: number): number {
  const strategy = batching.strategyChoice;
  if (strategy.case === "oldest" && strategy.value.maxCandidateSequences > 0) {
    return Math.max(1, Math.ceil(strategy.value.maxCandidateSequences / Math.max(1, instances)));
  }
  return Math.max(1, config.maxBatchSize);
}

/** Options for {@link SequenceBatcher}. */
export interface SequenceBatcherOptions {
  instances: readonly BackendInstance[];
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
 * sequences bound to the same instance share a batch (up to `max_batch_size`, equal shapes). With
 * direct, an instance holds `max_batch_size` sequences, each at a fixed batch position, and empty
 * positions below the highest ready one get null requests (READY false); a batch may wait for
 * `minimum_slot_utilization`. With oldest, an instance holds its share of
 * `max_candidate_sequences` and a batch may wait to fill unless it has a preferred size. A new
 * sequence with no free slot waits in a backlog until one ends. Cancelling
 * a queued request cancels every queued request of its sequence and ends it. The batcher adds
 * the configured control inputs (START, END, READY, CORRID) and carries implicit state
 * (`state`) from one request of a sequence to the next. A sequence idle for
 * `max_sequence_idle_microseconds` is released.
 */
export class SequenceBatcher implements Scheduler {
  readonly #config: ModelConfig;
  readonly #batching: ModelSequenceBatching;
  readonly #slots: Slot[];
  readonly #sequences = new Map<string, Sequence>();
  /** Sequences waiting for a free slot, oldest first. */
  readonly #backlog: Sequence[] = [];
  readonly #capacity: number;
  /** The strategy's `max_queue_delay_microseconds`: how long a short batch may wait to fill. */
  readonly #delayNs: bigint;
  /** Oldest strategy: the batch sizes that are sent at once. */
  readonly #preferred: readonly number[];
  /** The direct strategy (the default): fixed positions, null requests, minimum_slot_utilization. */
  readonly #direct: boolean;
  readonly #utilization: number;
  /** Inputs with `allow_ragged_batch`: their shapes need not match within a batch. */
  readonly #ragged: ReadonlySet<string>;
  #delayTimer: unknown;
  readonly #stats: ModelStatistics;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #initialStates: ReadonlyMap<string, Tensor>;
  /** The implicit states' output names (fed back as their inputs). */
  readonly #stateOutputs: readonly string[];
  readonly #idleNs: bigint;
  readonly #stringIds: boolean;
  readonly #typedIds: boolean;
  #timer: unknown;
  #running = 0;
  #draining = false;
  #drained?: () => void;

  constructor(options: SequenceBatcherOptions) {
    this.#config = options.config;
    if (options.config.schedulingChoice.case !== "sequenceBatching") throw new Error("not a sequence-batching model");
    this.#batching = options.config.schedulingChoice.value;
    this.#slots = options.instances.map((instance) => ({ instance, busy: false, positions: [] }));
    this.#stats = options.stats;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    this.#initialStates = options.initialStates ?? new Map();
    this.#stateOutputs = this.#batching.state.map((s) => s.outputName);
    this.#idleNs = (this.#batching.maxSequenceIdleMicroseconds || 1_000_000n) * 1000n;
    this.#capacity = slotsPerInstance(this.#config, this.#batching, this.#slots.length);
    const strategy = this.#batching.strategyChoice;
    this.#direct = strategy.case !== "oldest";
    this.#delayNs = (strategy.value?.maxQueueDelayMicroseconds ?? 0n) * 1000n;
    this.#utilization = strategy.case === "direct" ? strategy.value.minimumSlotUtilization : 0;
    this.#preferred = strategy.case === "oldest" ? strategy.value.preferredBatchSize : [];
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
        pending.onAbort = () => this.#cancel(sequence as Sequence, pending);
        signal.addEventListener("abort", pending.onAbort, { once: true });
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
    let wakeAt: bigint | undefined;
    for (const slot of this.#slots) {
      if (slot.busy) continue;
      const waiting = slot.positions.filter((q): q is Sequence => q !== undefined && !q.busy && q.queue.length > 0);
      if (waiting.length === 0) continue;
      // Oldest: the sequences whose next request waited longest; direct: by position.
      if (!this.#direct)
        waiting.sort((a, b) => ((a.queue[0]?.enqueuedNs ?? 0n) < (b.queue[0]?.enqueuedNs ?? 0n) ? -1 : 1));
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
      const due = oldest + this.#delayNs;
      // A batch short of what the strategy wants waits up to its max_queue_delay: oldest until it
      // is full or has a preferred size; direct until minimum_slot_utilization of its positions
      // have a request (with a utilization of 0, it never waits).
      const short = this.#direct
        ? this.#utilization > 0 && ready.length / max < this.#utilization
        : ready.length < max && !this.#preferred.includes(ready.length);
      if (this.#delayNs > 0n && short && due > now && !this.#draining) {
        if (wakeAt === undefined || due < wakeAt) wakeAt = due;
        continue;
      }
      const reason =
        this.#delayNs === 0n || (this.#direct && this.#utilization === 0)
          ? "no delay"
          : !short
            ? this.#direct
              ? "slot utilization reached"
              : ready.length === max
                ? "filled"
                : "preferred size reached"
            : "delay expired";
      this.#run(slot, ready, reason);
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
    this.#setIdleTimer();
    this.#checkDrained();
  }

  async #run(slot: Slot, sequences: Sequence[], reason: string): Promise<void> {
    slot.busy = true;
    this.#running++;
    const started = this.#clock.now();
    const batched = this.#config.maxBatchSize > 0;
    const items = sequences.map((sequence) => {
      sequence.busy = true;
      const pending = sequence.queue.shift() as Pending;
      this.#stats.pending--;
      if (pending.onAbort) pending.request.signal?.removeEventListener("abort", pending.onAbort);
      if (pending.start) sequence.state = this.#initialState(batched);
      const signals = { start: pending.start, end: pending.end, ready: true, correlationId: sequence.id };
      return { sequence, pending, request: this.#withControls(pending.request, signals, sequence.state) };
    });
    // Direct: each sequence keeps its position in the batch; the positions below the highest one
    // in use that have no request get a null request (READY false, zeros), as in Triton.
    const requests = items.map((i) => i.request);
    const at = items.map((_, i) => i);
    if (this.#direct && items.length > 0) {
      const byPosition = new Map(items.map((item, i) => [item.sequence.position, i]));
      const top = Math.max(...byPosition.keys());
      const model = items[0] as (typeof items)[number];
      requests.length = 0;
      for (let position = 0; position <= top; position++) {
        const i = byPosition.get(position);
        if (i !== undefined) {
          at[i] = requests.length;
          requests.push((items[i] as (typeof items)[number]).request);
        } else requests.push(this.#nullRequest(model.request, model.sequence.id));
      }
    }
    this.#log.verbose(
      1,
      `model '${this.#config.name}': sequence batch of size ${requests.length} (${items.length} request(s), ${requests.length - items.length} null) sent to ${slot.instance.name}: ${reason}`,
    );
    try {
      const result = await slot.instance.execute(requests);
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
          pending.reject(toInferenceError(outcome ?? new Error("backend returned no response")));
          return;
        }
        for (const state of this.#batching.state) {
          const next = outcome.find((t) => t.name === state.outputName);
          if (next) sequence.state.set(state.inputName, { ...next, name: state.inputName, movable: false });
        }
        // A state output reaches the client only if it asked for it by name.
        const visible = outcome.filter(
          (t) => !this.#stateOutputs.includes(t.name) || pending.request.outputs.some((o) => o.name === t.name),
        );
        pending.resolve({ outputs: visible, queueNs: started - pending.enqueuedNs });
      });
    } catch (error) {
      const failure = toInferenceError(error);
      for (const { pending } of items) pending.reject(failure);
    } finally {
      for (const { sequence, pending } of items) {
        sequence.busy = false;
        sequence.lastNs = this.#clock.now();
        if (sequence.cancelled) this.#freeSlot(sequence);
        else if (pending.end && sequence.queue.length === 0) this.#release(sequence);
      }
      slot.busy = false;
      this.#running--;
      this.#schedule();
    }
  }

  /**
   * A client request as the model receives it: plus the control inputs and the implicit state.
   * The state outputs are fetched with what the client asked for (every config output when it
   * named none): backends return only the outputs a request names or the config lists.
   */
  #withControls(request: InferenceRequest, signals: ControlSignals, state: Map<string, Tensor>): InferenceRequest {
    const batched = this.#config.maxBatchSize > 0;
    const asked = request.outputs;
    return {
      ...request,
      inputs: [...request.inputs, ...controlTensors(this.#batching, signals, batched), ...state.values()],
      outputs:
        this.#stateOutputs.length === 0
          ? asked
          : [
              ...(asked.length > 0 ? asked : this.#config.output.map((o) => ({ name: o.name, parameters: {} }))),
              ...this.#stateOutputs
                .filter((name) => !asked.some((o) => o.name === name))
                .map((name) => ({ name, parameters: {} })),
            ],
    };
  }

  /**
   * Triton's null request for an empty position of a direct batch: `model`'s inputs, shapes and
   * outputs with zero data (its state inputs too), every control false (READY too), a zero
   * correlation id and no sequence parameters. Its outputs are dropped; no sequence's state changes.
   */
  #nullRequest(model: InferenceRequest, id: CorrelationId): InferenceRequest {
    const controls = new Set(this.#batching.controlInput.map((c) => c.name));
    const zeros = (t: Tensor): Tensor => ({
      ...t,
      data:
        t.datatype === "BYTES"
          ? encodeBytesElements(Array.from({ length: elementCount(t.shape) }, () => new Uint8Array(0)))
          : new Uint8Array(t.data.byteLength),
      parameters: {},
      movable: true,
    });
    const signals = { start: false, end: false, ready: false, correlationId: typeof id === "string" ? "" : 0n };
    return {
      modelName: model.modelName,
      modelVersion: model.modelVersion,
      id: "",
      parameters: {},
      inputs: [
        ...model.inputs.filter((t) => !controls.has(t.name)).map(zeros),
        ...controlTensors(this.#batching, signals, this.#config.maxBatchSize > 0),
      ],
      outputs: model.outputs,
    };
  }

  /**
   * Each state input's value on a sequence's first request: its `initial_state` (shared by every
   * sequence, never moved), or zeros of the state's dims.
   */
  #initialState(batched: boolean): Map<string, Tensor> {
    const state = new Map<string, Tensor>();
    for (const s of this.#batching.state) {
      const initial = this.#initialStates.get(s.inputName);
      if (initial) {
        state.set(s.inputName, initial);
        continue;
      }
      const dims = s.dims.map(Number).map((d) => (d < 0 ? 1 : d));
      const info = datatypeOf(s.dataType);
      if (!info) continue;
      const size = info.byteSize > 0 ? elementCount(dims) * info.byteSize : elementCount(dims) * 4;
      state.set(s.inputName, {
        name: s.inputName,
        datatype: info.name,
        shape: batched ? [1, ...dims] : dims,
        data: new Uint8Array(size),
        parameters: {},
      });
    }
    return state;
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

  /** Release sequences idle longer than `max_sequence_idle_microseconds`; one timer for the next expiry. */
  #setIdleTimer(): void {
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    const now = this.#clock.now();
    let next: bigint | undefined;
    for (const sequence of [...this.#sequences.values()]) {
      if (sequence.busy || sequence.queue.length > 0) continue;
      const expires = sequence.lastNs + this.#idleNs;
      if (expires <= now) {
        this.#log.verbose(1, `model '${this.#config.name}': sequence ${String(sequence.id)} released after idling`);
        this.#release(sequence);
      } else if (next === undefined || expires < next) next = expires;
    }
    if (next !== undefined) {
      this.#timer = this.#clock.setTimer(
        () => {
          this.#timer = undefined;
          this.#setIdleTimer();
        },
        Number(next - now) / 1e6,
      );
    }
  }

  #checkDrained(): void {
    const waiting = [...this.#sequences.values()].some((s) => s.queue.length > 0);
    if (this.#draining && this.#running === 0 && !waiting) {
      if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
      if (this.#delayTimer !== undefined) this.#clock.clearTimer(this.#delayTimer);
      this.#drained?.();
    }
  }
}
