import { type ErrorId, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceRequest, InferenceResponse, StreamedResponse } from "../../base/inference-request.js";
import type { LoadOverrides } from "../../base/load-overrides.js";
import { type DeviceTensor, NO_BYTES, type Parameters, type Tensor } from "../../base/tensor.js";
import { captureCompute, type Trace } from "../../base/trace.js";
import type { DirectRecord, DirectRoute } from "../backend.js";
import {
  type BlsReply,
  tensorFromWire,
  tensorToWire,
  type WireBlsRequest,
  type WireBlsResponse,
  type WireTensor,
} from "./bls-wire.js";

/**
 * Errors a call gets before its model runs: what Triton's core answers while the request is
 * created and submitted (lookup, the request's checks, the scheduler's admission), as opposed to
 * the model's own failures.
 */
const REFUSED_BEFORE_RUNNING: ReadonlySet<ErrorId> = new Set<ErrorId>([
  "MODEL_NOT_FOUND",
  "MODEL_VERSION_NOT_FOUND",
  "MODEL_NO_VERSIONS",
  "MODEL_VERSION_NOT_READY",
  "UNEXPECTED_INPUT",
  "UNEXPECTED_OUTPUT",
  "DUPLICATE_INPUT",
  "DUPLICATE_OUTPUT",
  "MISSING_INPUTS",
  "BATCH_TOO_LARGE",
  "BATCH_MISMATCH",
  "UNEXPECTED_SHAPE",
  "WRONG_DATATYPE",
  "BYTE_SIZE_MISMATCH",
  "BAD_BYTES_INPUT",
  "BYTES_COUNT_MISMATCH",
  "UNKNOWN_DATATYPE",
  "RESERVED_PARAMETER",
  "PARAMETER_VALUE_TYPE",
  "QUEUE_FULL",
  "SEQUENCE_ID_REQUIRED",
  "SEQUENCE_BATCH_SIZE",
  "SEQUENCE_START_REQUIRED",
  "SEQUENCE_ID_TYPE",
  "DECOUPLED_INFER",
]);

/** The server's inference path, for BLS calls. */
export interface InferencePath {
  infer(request: InferenceRequest): Promise<InferenceResponse>;
  stream(request: InferenceRequest): AsyncIterable<StreamedResponse>;
  /** How a worker runs `name`'s batches itself (calls marked `direct`); absent or undefined: it cannot. */
  directRoute?(name: string, version: string): DirectRoute | undefined;
  /** Count a call a worker ran directly. */
  recordDirect?(record: DirectRecord): void;
  /** Model control for Python's `pb_utils.load_model` (the repository API's rules). */
  loadModel?(name: string, repository: string, readOverrides: () => LoadOverrides): Promise<void>;
  /** `pb_utils.unload_model`. */
  unloadModel?(name: string, repository: string, readDependents: () => boolean): Promise<void>;
  /** `pb_utils.is_model_ready`; throws NOT_FOUND for an unknown model. */
  modelReady?(name: string, version: string): Promise<boolean>;
}

/** Where {@link BlsCalls} sends replies and finds the signals of the requests a call came from. */
export interface BlsCallsOptions {
  inference: () => InferencePath;
  reply(message: BlsReply, transfer: readonly ArrayBuffer[]): void;
  /** The signal of an open request of the instance, by key. */
  signalOf(key: number): AbortSignal | undefined;
  /** Whether the instance's request `key` is still open. */
  isOpen(key: number): boolean;
  /** The trace of an open request of the instance, by key, when it is traced. */
  traceOf(key: number): Trace | undefined;
  /** The `priority` parameter of an open request of the instance, by key, when it has one. */
  priorityOf?(key: number): number | undefined;
  /**
   * Which calls are traced: `parents` — every call of a traced batch, as a child of the first
   * traced request in it (scripted models); `explicit` — a call that names its parent
   * (`WireBlsRequest.traceParent`, Python's `trace=request.trace()`, as Triton).
   */
  tracing: "parents" | "explicit";
}

/** A BLS output kept on a GPU for the model, and the requests whose end lets it go. */
interface Held {
  tensor: DeviceTensor;
  /** What it is, as the call returned it: a model may rename it, nothing else. */
  datatype: Tensor["datatype"];
  shape: number[];
  /** Open requests of the batch that made the call; released when the last one ends. */
  parents: Set<number>;
}

/**
 * One instance's BLS calls: a model's `infer` / `stream` run on the server's own inference path
 * and are answered message by message. A call ends when the model cancels it, when every request
 * of the batch that made it is cancelled (a call with no signal of its own), or with the instance.
 *
 * A call that prefers GPU memory (Triton's `preferred_memory`) gets the outputs a model made on
 * that GPU as references (`WireTensor.device`) instead of bytes; the model passes them to further
 * calls (handed over on the device) or returns them. They are held here until the model drops
 * them, the requests of the batch that made the call have all ended, or the instance goes.
 */
export class BlsCalls {
  readonly #options: BlsCallsOptions;
  readonly #calls = new Map<number, AbortController>();
  readonly #held = new Map<number, Held>();
  #nextRef = 1;

  constructor(options: BlsCallsOptions) {
    this.#options = options;
  }

  /**
   * Run the model's call number `call`. `parents` are the open requests of the batch that made it;
   * `ownSignal`: the model cancels it itself, so their cancellation does not.
   */
  async run(
    call: number,
    wire: WireBlsRequest,
    stream: boolean,
    parents: readonly number[],
    ownSignal = false,
  ): Promise<void> {
    const controller = new AbortController();
    this.#calls.set(call, controller);
    const parentSignals = parents.flatMap((key) => this.#options.signalOf(key) ?? []);
    const onAbort = () => {
      if (parentSignals.every((s) => s.aborted)) controller.abort();
    };
    const linked = !ownSignal && parents.length > 0 && parentSignals.length === parents.length;
    if (linked) {
      for (const signal of parentSignals) signal.addEventListener("abort", onAbort, { once: true });
      onAbort();
    }
    const reply = (response: InferenceResponse | undefined, final: boolean, error?: unknown, route?: DirectRoute) => {
      // After the instance restarted, call numbers start again: a late answer must not reach the new one.
      if (this.#calls.get(call) !== controller) {
        for (const t of response?.outputs ?? []) t.device?.release();
        return;
      }
      const transfer = new Set<ArrayBuffer>();
      const out: WireBlsResponse | undefined = response && {
        modelName: response.modelName,
        modelVersion: response.modelVersion,
        id: response.id,
        parameters: response.parameters,
        outputs: response.outputs.map((t) => (t.device ? this.#hold(t, t.device, parents) : tensorToWire(t, transfer))),
      };
      const failure = error === undefined ? undefined : toInferenceError(error);
      this.#options.reply(
        {
          kind: "bls-reply",
          call,
          ...(out ? { response: out } : {}),
          ...(failure
            ? {
                error: {
                  message: failure.message,
                  code: failure.code,
                  ...(failure instanceof InferenceError && REFUSED_BEFORE_RUNNING.has(failure.id)
                    ? { refused: true }
                    : {}),
                },
              }
            : {}),
          final,
          ...(route ? { route } : {}),
        },
        [...transfer],
      );
    };
    const parentTrace =
      this.#options.tracing === "explicit"
        ? wire.traceParent !== undefined && parents.includes(wire.traceParent)
          ? this.#options.traceOf(wire.traceParent)
          : undefined
        : this.#firstTrace(parents);
    const trace = parentTrace?.child();
    try {
      const request: InferenceRequest = {
        modelName: wire.model,
        modelVersion: wire.version,
        id: wire.id,
        parameters: this.#withPriority(wire.parameters, parents),
        inputs: wire.inputs.map((t) => this.#input(t)),
        outputs: wire.outputs.map((name) => ({ name, parameters: {} })),
        signal: controller.signal,
        ...(wire.preferredMemory?.kind === "gpu" ? { outputsOnDevice: wire.preferredMemory.deviceId } : {}),
        ...(trace ? { trace } : {}),
      };
      const path = this.#options.inference();
      if (!stream) {
        const response = await path.infer(request);
        // A route for the next calls, where the model allows it (not for a trace that records
        // tensors: those are captured here).
        const route = wire.direct && !trace?.tensors ? path.directRoute?.(wire.model, wire.version) : undefined;
        reply(response, true, undefined, route);
      } else {
        let ended = false;
        for await (const item of path.stream(request)) {
          // Cancelling tells the model called (`is_cancelled()`); one that goes on answers on, as
          // in Triton, until its final flag. The instance gone (its calls forgotten): nobody listens.
          if (this.#calls.get(call) !== controller) break;
          reply(item.empty ? undefined : item.response, item.final);
          ended = item.final;
        }
        if (!ended) reply(undefined, true);
      }
    } catch (error) {
      reply(undefined, true, error);
    } finally {
      trace?.end();
      if (this.#calls.get(call) === controller) this.#calls.delete(call);
      // A request may make thousands of calls (a denoising loop): each one's listener goes with it.
      if (linked) for (const signal of parentSignals) signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * A call without a `priority` of its own runs at its requests' (the highest among them, 1 being
   * the highest): a pipeline's steps keep the priority its client asked for.
   */
  #withPriority(parameters: Parameters, parents: readonly number[]): Parameters {
    if (parameters.priority !== undefined || !this.#options.priorityOf) return parameters;
    let highest: number | undefined;
    for (const key of parents) {
      const priority = this.#options.priorityOf(key);
      if (priority === undefined || priority < 1) continue;
      if (highest === undefined || priority < highest) highest = priority;
    }
    return highest === undefined ? parameters : { ...parameters, priority: highest };
  }

  #firstTrace(parents: readonly number[]): Trace | undefined {
    for (const key of parents) {
      const trace = this.#options.traceOf(key);
      if (trace) return trace;
    }
    return undefined;
  }

  /** A call the worker ran directly: counted in its model's statistics, traced when its caller is. */
  recordDirect(record: DirectRecord): void {
    if (record.trace) this.#traceDirect(record, record.trace);
    this.#options.inference().recordDirect?.(record);
  }

  /**
   * A direct call as its caller's trace's child, with the worker's stamps: no queue (QUEUE_START
   * is its start), its compute from the handing to the runner to the answer, split by the
   * execution's phases as a scheduled batch's is.
   */
  #traceDirect(record: DirectRecord, stamps: NonNullable<DirectRecord["trace"]>): void {
    const trace = this.#options.traceOf(stamps.parent)?.child();
    if (!trace) return;
    trace.start(record.model, record.version, stamps.id, stamps.startNs);
    trace.capture("QUEUE_START", stamps.startNs);
    if (stamps.compute && record.execution) {
      captureCompute(trace, stamps.compute.startNs, stamps.compute.endNs, {
        computeInputNs: BigInt(Math.max(0, Math.round(record.execution.inputNs))),
        computeOutputNs: BigInt(Math.max(0, Math.round(record.execution.outputNs))),
      });
    }
    trace.capture("REQUEST_END", stamps.endNs);
    trace.end();
  }

  /** The model cancelled call number `call`. */
  cancel(call: number): void {
    this.#calls.get(call)?.abort();
  }

  /** The instance is gone: every call it made is cancelled, every tensor it held let go. */
  cancelAll(): void {
    for (const controller of this.#calls.values()) controller.abort();
    this.#calls.clear();
    for (const held of this.#held.values()) held.tensor.release();
    this.#held.clear();
  }

  /** The instance's request `key` ended: tensors held for calls of its batch alone are let go. */
  ended(key: number): void {
    for (const [ref, held] of this.#held) {
      if (held.parents.delete(key) && held.parents.size === 0) this.drop([ref]);
    }
  }

  /**
   * What the instance's request `from` holds goes on for `to` instead (a request rescheduled:
   * its next execution, or a stand-in between the two, see `PythonInstance`).
   */
  reparent(from: number, to: number): void {
    for (const held of this.#held.values()) {
      if (held.parents.delete(from)) held.parents.add(to);
    }
  }

  /** The model no longer holds these device tensors. */
  drop(refs: readonly number[]): void {
    for (const ref of refs) {
      this.#held.get(ref)?.tensor.release();
      this.#held.delete(ref);
    }
  }

  /**
   * A tensor the model returns as an output: bytes as they came, or a held device tensor as a
   * handle of its own (its rows, on the device), so that the response outlives the hold.
   */
  output(wire: WireTensor): Tensor {
    if (!wire.device) return tensorFromWire(wire);
    const held = this.#found(wire);
    const rows = held.shape[0];
    if (!held.tensor.rows || rows === undefined) {
      throw new InferenceError("BLS_DEVICE_TENSOR_SCALAR", { tensor: wire.name, device: held.tensor.deviceId });
    }
    return this.#named(wire.name, held, held.tensor.rows(0, rows));
  }

  /** An input of a call: bytes, or a held device tensor lent to it (its holder lets it go, not the call). */
  #input(wire: WireTensor): Tensor {
    if (!wire.device) return tensorFromWire(wire);
    const held = this.#found(wire);
    const lent: DeviceTensor = Object.assign(Object.create(held.tensor) as DeviceTensor, { release: () => {} });
    return this.#named(wire.name, held, lent);
  }

  /** The held tensor a model names; it may rename it, but not say it is of another type or shape. */
  #found(wire: WireTensor): Held {
    const held = wire.device && this.#held.get(wire.device.ref);
    if (!held) {
      throw new InferenceError("BLS_DEVICE_TENSOR_RELEASED", { tensor: wire.name, device: wire.device?.deviceId ?? 0 });
    }
    if (wire.datatype !== held.datatype || wire.shape.join() !== held.shape.join()) {
      throw new InferenceError("BLS_DEVICE_TENSOR_MISMATCH", {
        tensor: wire.name,
        device: held.tensor.deviceId,
        held: `${held.datatype} [${held.shape.join(", ")}]`,
        given: `${wire.datatype} [${wire.shape.join(", ")}]`,
      });
    }
    return held;
  }

  #named(name: string, held: Held, device: DeviceTensor): Tensor {
    return {
      name,
      datatype: held.datatype,
      shape: [...held.shape],
      data: NO_BYTES,
      parameters: {},
      movable: false,
      device,
    };
  }

  /**
   * Hold `device` for the requests `parents` as if a call had returned it (a tensor a Python model
   * lends from its own GPU memory, given to a call by reference): its reference for the model's wire.
   */
  hold(tensor: Tensor, device: DeviceTensor, parents: readonly number[]): WireTensor {
    return this.#hold(tensor, device, parents);
  }

  /** The direct route to `model`'s `version` now (renewing one a worker uses), where the model allows one. */
  directRoute(model: string, version: string): DirectRoute | undefined {
    return this.#options.inference().directRoute?.(model, version);
  }

  /** The device tensor held as `ref` (shared, not lent: the holder still lets it go), if any. */
  heldDevice(ref: number): DeviceTensor | undefined {
    return this.#held.get(ref)?.tensor;
  }

  /**
   * A handle of its own on the device tensor held as `ref` (its rows: the memory lives until both
   * are let go), for a borrower that may outlive the hold; undefined where it cannot have one.
   */
  retained(ref: number): DeviceTensor | undefined {
    const held = this.#held.get(ref);
    const rows = held?.shape[0];
    return held?.tensor.rows && rows !== undefined ? held.tensor.rows(0, rows) : undefined;
  }

  #hold(tensor: Tensor, device: DeviceTensor, parents: readonly number[]): WireTensor {
    const ref = this.#nextRef++;
    const open = parents.filter((key) => this.#options.isOpen(key));
    // Made for requests that have all ended meanwhile: nobody can use it any more.
    if (parents.length > 0 && open.length === 0) device.release();
    else {
      this.#held.set(ref, {
        tensor: device,
        datatype: tensor.datatype,
        shape: [...tensor.shape],
        parents: new Set(open),
      });
    }
    return {
      name: tensor.name,
      datatype: tensor.datatype,
      shape: tensor.shape,
      data: NO_BYTES,
      device: { ref, deviceId: device.deviceId, byteSize: device.byteSize },
    };
  }
}
