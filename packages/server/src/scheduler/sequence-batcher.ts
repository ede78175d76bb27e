import type { ModelConfig, ModelSequenceBatching } from "@galley/proto";
import type { BackendInstance } from "../backend/backend.js";
import { datatypeOf } from "../core/datatype.js";
import { InferenceError, toInferenceError } from "../core/errors.js";
import type { InferenceRequest } from "../core/inference-request.js";
import type { ModelStatistics } from "../core/statistics.js";
import { elementCount, type Tensor } from "../core/tensor.js";
import type { Logger } from "../log.js";
import { type Clock, systemClock } from "./clock.js";
import type { ScheduledResult, Scheduler } from "./scheduler.js";
import { type CorrelationId, controlTensors, hasCorrelationControl, usesStringIds } from "./sequence-controls.js";

interface Pending {
  request: InferenceRequest;
  start: boolean;
  end: boolean;
  enqueuedNs: bigint;
  resolve(result: ScheduledResult): void;
  reject(error: InferenceError): void;
}

interface Sequence {
  id: CorrelationId;
  instance: Slot;
  queue: Pending[];
  busy: boolean;
  lastNs: bigint;
  /** Implicit state: the value of each state input for the next request. */
  state: Map<string, Tensor>;
}

interface Slot {
  instance: BackendInstance;
  busy: boolean;
  sequences: number;
}

/** Options for {@link SequenceBatcher}. */
export interface SequenceBatcherOptions {
  instances: readonly BackendInstance[];
  config: ModelConfig;
  stats: ModelStatistics;
  log: Logger;
  clock?: Clock;
}

/**
 * Triton's sequence batcher (PROTOCOL.md §3.7, §9.2): requests carry a correlation id
 * (`sequence_id`, integer or string) and START/END flags. A sequence is bound to one instance
 * from its START to its END; its requests run one at a time, in order; requests of different
 * sequences bound to the same instance share a batch (up to `max_batch_size`). The batcher adds
 * the configured control inputs (START, END, READY, CORRID) and carries implicit state
 * (`state`) from one request of a sequence to the next. A sequence idle for
 * `max_sequence_idle_microseconds` is released.
 */
export class SequenceBatcher implements Scheduler {
  readonly #config: ModelConfig;
  readonly #batching: ModelSequenceBatching;
  readonly #slots: Slot[];
  readonly #sequences = new Map<string, Sequence>();
  readonly #stats: ModelStatistics;
  readonly #log: Logger;
  readonly #clock: Clock;
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
    this.#slots = options.instances.map((instance) => ({ instance, busy: false, sequences: 0 }));
    this.#stats = options.stats;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    this.#idleNs = (this.#batching.maxSequenceIdleMicroseconds || 1_000_000n) * 1000n;
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
      const key = `${typeof id}:${String(id)}`;
      let sequence = this.#sequences.get(key);
      if (!sequence && !start) {
        reject(new InferenceError("SEQUENCE_START_REQUIRED", { id: String(id), model }));
        return;
      }
      const now = this.#clock.now();
      if (!sequence) {
        const slot = [...this.#slots].sort((a, b) => a.sequences - b.sequences)[0] as Slot;
        slot.sequences++;
        sequence = { id, instance: slot, queue: [], busy: false, lastNs: now, state: new Map() };
        this.#sequences.set(key, sequence);
      } else if (start) {
        this.#log.verbose(1, `model '${model}': sequence ${String(id)} restarted by a new START`);
      }
      sequence.lastNs = now;
      sequence.queue.push({ request, start, end, enqueuedNs: now, resolve, reject });
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

  #schedule(): void {
    for (const slot of this.#slots) {
      if (slot.busy) continue;
      const ready = [...this.#sequences.values()]
        .filter((s) => s.instance === slot && !s.busy && s.queue.length > 0)
        .sort((a, b) => ((a.queue[0]?.enqueuedNs ?? 0n) < (b.queue[0]?.enqueuedNs ?? 0n) ? -1 : 1))
        .slice(0, Math.max(1, this.#config.maxBatchSize));
      if (ready.length > 0) this.#run(slot, ready);
    }
    this.#setIdleTimer();
    this.#checkDrained();
  }

  async #run(slot: Slot, sequences: Sequence[]): Promise<void> {
    slot.busy = true;
    this.#running++;
    const started = this.#clock.now();
    const batched = this.#config.maxBatchSize > 0;
    const items = sequences.map((sequence) => {
      sequence.busy = true;
      const pending = sequence.queue.shift() as Pending;
      this.#stats.pending--;
      if (pending.start) sequence.state = this.#initialState(batched);
      const controls = controlTensors(
        this.#batching,
        { start: pending.start, end: pending.end, ready: true, correlationId: sequence.id },
        batched,
      );
      const stateOutputs = this.#batching.state.map((s) => s.outputName);
      const request: InferenceRequest = {
        ...pending.request,
        inputs: [...pending.request.inputs, ...controls, ...sequence.state.values()],
        outputs:
          stateOutputs.length === 0 || pending.request.outputs.length === 0
            ? pending.request.outputs
            : [...pending.request.outputs, ...stateOutputs.map((name) => ({ name, parameters: {} }))],
      };
      return { sequence, pending, request };
    });
    try {
      const result = await slot.instance.execute(items.map((i) => i.request));
      this.#stats.recordExecution(
        items.length,
        items.length,
        result.computeInputNs,
        result.computeInferNs,
        result.computeOutputNs,
      );
      items.forEach(({ sequence, pending }, i) => {
        const outcome = result.responses[i];
        if (outcome === undefined || outcome instanceof Error) {
          pending.reject(toInferenceError(outcome ?? new Error("backend returned no response")));
          return;
        }
        for (const state of this.#batching.state) {
          const next = outcome.find((t) => t.name === state.outputName);
          if (next) sequence.state.set(state.inputName, { ...next, name: state.inputName, movable: false });
        }
        const hidden = new Set(this.#batching.state.map((s) => s.outputName));
        const visible = pending.request.outputs.length === 0 ? outcome.filter((t) => !hidden.has(t.name)) : outcome;
        pending.resolve({ outputs: visible, queueNs: started - pending.enqueuedNs });
      });
    } catch (error) {
      const failure = toInferenceError(error);
      for (const { pending } of items) pending.reject(failure);
    } finally {
      for (const { sequence, pending } of items) {
        sequence.busy = false;
        sequence.lastNs = this.#clock.now();
        if (pending.end && sequence.queue.length === 0) this.#release(sequence);
      }
      slot.busy = false;
      this.#running--;
      this.#schedule();
    }
  }

  /** Each state input's value on a sequence's first request: its initial state, or zeros. */
  #initialState(batched: boolean): Map<string, Tensor> {
    const state = new Map<string, Tensor>();
    for (const s of this.#batching.state) {
      const initial = s.initialState[0];
      const dims = (initial?.dims.length ? initial.dims : s.dims).map(Number).map((d) => (d < 0 ? 1 : d));
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

  #release(sequence: Sequence): void {
    this.#sequences.delete(`${typeof sequence.id}:${String(sequence.id)}`);
    sequence.instance.sequences--;
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
      this.#drained?.();
    }
  }
}
