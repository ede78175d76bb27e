import type { ModelConfig, ModelEnsembling_Step } from "@galley/proto";
import { now } from "../base/clock.js";
import { InferenceError, toInferenceError } from "../base/errors.js";
import type { InferenceRequest, InferenceResponse } from "../base/inference-request.js";
import type { Logger } from "../base/log.js";
import { hostTensor, type Parameters, type ParameterValue, type Tensor } from "../base/tensor.js";
import { type DevicePlan, planDeviceHandoff, type StepPlacement } from "./ensemble-device-plan.js";
import type { ScheduledResult, Scheduler } from "./scheduler.js";

/**
 * Runs one request on a composing model, through the server's own path (validation, scheduling,
 * statistics). `placement`, when given, says where a model version runs when it keeps tensors on
 * a GPU (`BackendModel.deviceTensors`): the scheduler then hands tensors between such steps on the
 * device (see {@link planDeviceHandoff}).
 */
export type ComposingInfer = ((request: InferenceRequest) => Promise<InferenceResponse>) & {
  placement?: (model: string, version: string) => StepPlacement | undefined;
};

/** A counting semaphore: `max_inflight_requests` per step, 0 for no bound. */
class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];
  constructor(readonly limit: number) {
    this.#free = limit;
  }
  async acquire(): Promise<void> {
    if (this.limit === 0) return;
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }
  release(): void {
    if (this.limit === 0) return;
    const next = this.#waiting.shift();
    if (next) next();
    else this.#free++;
  }
}

/** A sequence's correlation id and START/END flags, as a step's outputs carry them on. */
interface Sequence {
  id: bigint | string;
  start: boolean;
  end: boolean;
}

/**
 * One tensor of an ensemble request: its value, the batch size of the request that made it (0
 * when that model does not batch, as Triton counts it), and, for a step's output, the sequence
 * the step ran in.
 */
interface Value {
  tensor: Tensor;
  batch: number;
  sequence?: Sequence;
}

/**
 * Triton's ensemble scheduler (PROTOCOL.md §3.8, §4.4): the steps of `ensemble_scheduling` form
 * a graph over named tensors; a step starts as soon as all its inputs exist, so independent
 * branches run concurrently, and a step none of whose outputs leads to a requested output does
 * not run. Between a batching and a non-batching model the batch dimension is added or removed
 * as Triton does. Tensors pass between steps as the same views (a tensor read by more than one
 * step, returned to the client, or sharing its buffer with another tensor of the request, is
 * marked not movable so no step can take its buffer away).
 * A failing step fails the request and names the step; an output no step made (a composing
 * model that did not produce it, or a step that could not run for want of it) is left out of the
 * response and logged, as Triton does. Each step honours its model version, and
 * `max_inflight_requests` bounds how many requests each step runs at once, so a fast producer
 * cannot grow memory without limit. The response carries the sequence its outputs were made in
 * (`sequence_id`, `sequence_start`, `sequence_end`), as Triton's does.
 */
export class EnsembleScheduler implements Scheduler {
  readonly #steps: readonly ModelEnsembling_Step[];
  readonly #slots: Slots[];
  readonly #consumers = new Map<string, Set<number>>();
  readonly #producer = new Map<string, number>();
  readonly #outputs: Set<string>;
  readonly #handoff: boolean;
  #inFlight = 0;
  #draining = false;
  #drained?: () => void;

  constructor(
    readonly config: ModelConfig,
    readonly infer: ComposingInfer,
    readonly log?: Logger,
  ) {
    const ensembling =
      config.schedulingChoice.case === "ensembleScheduling" ? config.schedulingChoice.value : undefined;
    this.#steps = ensembling?.step ?? [];
    const bound = ensembling?.maxInflightRequests ?? 0;
    this.#slots = this.#steps.map(() => new Slots(bound));
    this.#outputs = new Set(config.output.map((o) => o.name));
    // `parameters { key: "DEVICE_HANDOFF" value: { string_value: "false" } }` sends every tensor
    // through host memory (the comparison the GPU benchmark makes).
    this.#handoff = config.parameters.DEVICE_HANDOFF?.stringValue?.trim().toLowerCase() !== "false";
    for (const [index, step] of this.#steps.entries()) {
      for (const tensor of Object.values(step.inputMap)) {
        const readers = this.#consumers.get(tensor) ?? new Set();
        this.#consumers.set(tensor, readers.add(index));
      }
      for (const tensor of Object.values(step.outputMap)) this.#producer.set(tensor, index);
    }
  }

  async enqueue(request: InferenceRequest, batchSize = 0): Promise<ScheduledResult> {
    this.#inFlight++;
    const start = now();
    try {
      const { outputs, parameters } = await this.#run(request, this.config.maxBatchSize > 0 ? batchSize : 0);
      return { outputs, queueNs: now() - start, parameters };
    } finally {
      this.#inFlight--;
      if (this.#draining && this.#inFlight === 0) this.#drained?.();
    }
  }

  drain(): Promise<void> {
    this.#draining = true;
    return new Promise((resolve) => {
      this.#drained = resolve;
      if (this.#inFlight === 0) resolve();
    });
  }

  /**
   * The steps to run for `wanted` outputs, as Triton prunes them: walking back from the outputs
   * nobody asked for, a step all of whose outputs are unneeded is dropped, and so are the tensors
   * only it read. An unrequested output that a running step still reads stays needed.
   */
  #live(wanted: ReadonlySet<string>): Set<number> {
    const live = new Set(this.#steps.keys());
    const readers = new Map([...this.#consumers].map(([tensor, steps]) => [tensor, new Set(steps)]));
    const unneeded = new Map<number, number>();
    let ignored = [...this.#outputs].filter((o) => !wanted.has(o) && (readers.get(o)?.size ?? 0) === 0);
    while (ignored.length > 0) {
      const next: string[] = [];
      for (const tensor of ignored) {
        const index = this.#producer.get(tensor);
        // An ensemble input: no step makes it.
        if (index === undefined) continue;
        const step = this.#steps[index] as ModelEnsembling_Step;
        const left = (unneeded.get(index) ?? Object.keys(step.outputMap).length) - 1;
        unneeded.set(index, left);
        if (left > 0) continue;
        live.delete(index);
        for (const input of new Set(Object.values(step.inputMap))) {
          const remaining = readers.get(input);
          remaining?.delete(index);
          if (remaining?.size === 0 && !wanted.has(input)) next.push(input);
        }
      }
      ignored = next;
    }
    return live;
  }

  /**
   * Which tensors stay on a GPU between steps for a request asking for `wanted` outputs (all by
   * default), with the reason for each: where the composing models run now decides.
   */
  devicePlan(wanted: readonly string[] = this.config.output.map((o) => o.name)): DevicePlan {
    if (!this.#handoff) return { decisions: [], keep: new Map() };
    return this.#plan(new Set(wanted), this.#live(new Set(wanted)));
  }

  #plan(
    wanted: ReadonlySet<string>,
    live: ReadonlySet<number>,
    takenOnDevice?: ReadonlyMap<string, number>,
  ): DevicePlan {
    const placement = this.infer.placement;
    return planDeviceHandoff(
      this.#steps,
      live,
      wanted,
      (index) => {
        const step = this.#steps[index];
        if (!placement || !step) return undefined;
        return placement(step.modelName, step.modelVersion === -1n ? "" : String(step.modelVersion));
      },
      takenOnDevice,
    );
  }

  async #run(request: InferenceRequest, batch: number): Promise<{ outputs: Tensor[]; parameters: Parameters }> {
    const values = new Map<string, Value>();
    try {
      return await this.#runSteps(request, batch, values);
    } finally {
      // Tensors kept on a GPU between steps are let go once every step has run (the outputs
      // returned are host copies).
      for (const value of values.values()) value.tensor.device?.release();
    }
  }

  async #runSteps(
    request: InferenceRequest,
    batch: number,
    values: Map<string, Value>,
  ): Promise<{ outputs: Tensor[]; parameters: Parameters }> {
    const wanted =
      request.outputs.length > 0 ? request.outputs.map((o) => o.name) : this.config.output.map((o) => o.name);
    for (const input of request.inputs) this.#keep(values, input.name, { tensor: input, batch });
    const ensembleSequence = sequenceOf(request.parameters);
    const pending = this.#live(new Set(wanted));
    // Outputs the caller takes on a GPU (`deviceOutputs`, set by the core: a CUDA region, a BLS
    // call preferring GPU memory) may stay on the GPU that makes them.
    const takenOnDevice = request.deviceOutputs ?? new Map<string, number>();
    const keep =
      this.infer.placement && this.#handoff ? this.#plan(new Set(wanted), pending, takenOnDevice).keep : undefined;
    const running = new Map<number, Promise<void>>();
    let failure: unknown;

    const launch = (index: number) => {
      const step = this.#steps[index] as ModelEnsembling_Step;
      pending.delete(index);
      const sources = Object.entries(step.inputMap).map(([modelInput, tensor]) => {
        const value = values.get(tensor) as Value;
        return { value, input: { ...value.tensor, name: modelInput } };
      });
      // Triton runs a step in the sequence of the first of its inputs a step made, else the ensemble's.
      const sequence = sources.find((s) => s.value.sequence)?.value.sequence ?? ensembleSequence;
      let stepBatch = 0;
      const stepRequest: InferenceRequest = {
        modelName: step.modelName,
        modelVersion: step.modelVersion === -1n ? "" : String(step.modelVersion),
        id: request.id,
        parameters: sameSequence(sequence, ensembleSequence)
          ? request.parameters
          : { ...request.parameters, ...sequenceParameters(sequence, request.parameters.sequence_id) },
        inputs: sources.map((s) => s.input),
        outputs: Object.keys(step.outputMap).map((name) => ({ name, parameters: {} })),
        ...(request.signal ? { signal: request.signal } : {}),
        ...(keep?.has(index) ? { deviceOutputs: keep.get(index) } : {}),
        // Each step of a traced ensemble request is a child trace (Triton's SpawnChildTrace).
        ...(request.trace ? { trace: request.trace.child() } : {}),
        adapt: (config) => {
          const batching = config.maxBatchSize > 0;
          stepRequest.inputs = stepRequest.inputs.map((input, k) => {
            const dims = config.input.find((i) => i.name === input.name)?.dims.map(Number);
            const from = sources[k]?.value.batch ?? 0;
            return dims ? { ...input, shape: reshapeDims(dims, batching, from, input.shape) } : input;
          });
          stepBatch = batching ? (stepRequest.inputs[0]?.shape[0] ?? 0) : 0;
        },
      };
      const task = (async () => {
        await this.#slots[index]?.acquire();
        try {
          const response = await this.infer(stepRequest);
          const made = responseSequence(response.parameters, sequence);
          for (const output of response.outputs) {
            const tensor = step.outputMap[output.name];
            if (tensor === undefined) continue;
            this.#keep(values, tensor, { tensor: { ...output, name: tensor }, batch: stepBatch, sequence: made });
          }
        } catch (error) {
          const cause = toInferenceError(error);
          failure ??= new InferenceError(
            "ENSEMBLE_STEP_FAILED",
            { ensemble: this.config.name, step: index, model: step.modelName, message: cause.message },
            { cause, code: cause.code },
          );
        } finally {
          stepRequest.trace?.end();
          this.#slots[index]?.release();
          running.delete(index);
        }
      })();
      running.set(index, task);
    };

    const startReady = () => {
      for (const index of [...pending]) {
        const step = this.#steps[index] as ModelEnsembling_Step;
        if (Object.values(step.inputMap).every((t) => values.has(t))) launch(index);
      }
    };
    startReady();
    while (running.size > 0) {
      await Promise.race(running.values());
      if (failure) break;
      startReady();
    }
    if (failure) {
      await Promise.allSettled(running.values());
      throw failure;
    }
    const parameters: Parameters = {};
    const outputs: Tensor[] = [];
    for (const name of wanted) {
      const value = values.get(name);
      if (!value) {
        // As Triton: the outputs that were made are returned, the others are left out.
        this.log?.verbose(1, `Composing models did not output tensor ${name}`);
        continue;
      }
      if (value.sequence) Object.assign(parameters, sequenceParameters(value.sequence, request.parameters.sequence_id));
      const spec = this.config.output.find((o) => o.name === name);
      const dims = (spec?.reshape ? spec.reshape.shape : (spec?.dims ?? [])).map(Number);
      // A returned tensor stays on its GPU only for a caller that takes it there (it is then the
      // caller's to let go, no longer this request's); any other comes over as host bytes.
      const device = value.tensor.device;
      const handedOn = device !== undefined && request.deviceOutputs?.get(name) === device.deviceId;
      if (handedOn) values.delete(name);
      const tensor = device && !handedOn ? await hostTensor(value.tensor) : value.tensor;
      outputs.push({ ...tensor, name, shape: reshapeDims(dims, batch !== 0, value.batch, value.tensor.shape) });
    }
    return { outputs, parameters };
  }

  /**
   * Record a tensor of the request. One read by more than one step, or returned to the client,
   * keeps its buffer here; so do tensors whose bytes share a buffer with another tensor of the
   * request (a model that returned one input as two outputs, binary inputs read from one body):
   * moving one to a step's worker would detach the others' bytes before their steps run.
   */
  #keep(values: Map<string, Value>, name: string, value: Value): void {
    const { tensor } = value;
    let movable = tensor.movable === true;
    if ((this.#consumers.get(name)?.size ?? 0) > 1 || this.#outputs.has(name)) movable = false;
    const buffer = tensor.data.buffer;
    if (tensor.data.byteLength > 0) {
      for (const [other, held] of values) {
        const data = held.tensor.data;
        if (other === name || data.buffer !== buffer || data.byteLength === 0) continue;
        movable = false;
        if (held.tensor.movable) values.set(other, { ...held, tensor: { ...held.tensor, movable: false } });
      }
    }
    values.set(name, tensor.movable && !movable ? { ...value, tensor: { ...tensor, movable: false } } : value);
  }
}

/**
 * Triton's `ReshapeTensorDims`: between a batching and a non-batching model, a tensor whose shape
 * is the consumer's `dims` gains a batch dimension of 1, and a batch of one loses it when the
 * shape is not already the consumer's. Anything else passes as it is.
 */
function reshapeDims(dims: readonly number[], batching: boolean, batch: number, shape: number[]): number[] {
  if (batching === (batch !== 0)) return shape;
  if (batching) return matchesDims(dims, shape) ? [1, ...shape] : shape;
  return !matchesDims(dims, shape) && batch === 1 ? shape.slice(1) : shape;
}

function matchesDims(dims: readonly number[], shape: readonly number[]): boolean {
  return dims.length === shape.length && dims.every((d, i) => d === -1 || shape[i] === -1 || d === shape[i]);
}

/** The sequence a request runs in: its correlation id (0 when none) and flags. */
function sequenceOf(parameters: Parameters): Sequence {
  return {
    id: correlationId(parameters.sequence_id) ?? 0n,
    start: parameters.sequence_start === true,
    end: parameters.sequence_end === true,
  };
}

function correlationId(value: ParameterValue | undefined): bigint | string | undefined {
  if (typeof value === "string" || typeof value === "bigint") return value;
  if (typeof value === "number" && Number.isFinite(value)) return BigInt(Math.trunc(value));
  return undefined;
}

/**
 * The sequence a step's outputs carry on: the step's, unless the composing model answered with
 * `sequence_*` parameters of its own; then, as in Triton, its flags are only the ones it gave.
 */
function responseSequence(parameters: Parameters, step: Sequence): Sequence {
  const { sequence_id: id, sequence_start: start, sequence_end: end } = parameters;
  if (id === undefined && start === undefined && end === undefined) return step;
  return { id: correlationId(id) ?? step.id, start: start === true, end: end === true };
}

function sameSequence(a: Sequence, b: Sequence): boolean {
  return a.id === b.id && a.start === b.start && a.end === b.end;
}

/** A sequence as parameters: the id typed as the ensemble request's (a string, else an int64). */
function sequenceParameters(sequence: Sequence, requestId: ParameterValue | undefined): Parameters {
  const id =
    typeof requestId === "string"
      ? typeof sequence.id === "string"
        ? sequence.id
        : ""
      : BigInt.asIntN(64, typeof sequence.id === "bigint" ? sequence.id : 0n);
  return { sequence_id: id, sequence_start: sequence.start, sequence_end: sequence.end };
}
