import { now } from "./clock.js";
import type { Tensor } from "./tensor.js";
import { tensorTraceJson } from "./trace-tensor.js";

/** Trace levels, Triton's bits: `TIMESTAMPS` 0x4, `TENSORS` 0x8; 0 is `OFF`. */
export const TRACE_TIMESTAMPS = 0x4;
export const TRACE_TENSORS = 0x8;

/** Where a finished trace tree goes (the setting that sampled it). */
export interface TraceSink {
  /** The tree's objects, `,`-joined JSON, once its root and every child have ended. */
  collect(text: string): void;
}

/**
 * The traces of one sampled request: the root and the children the core spawned for it (ensemble
 * steps, BLS calls). Written as one piece when the last of them ends, as Triton writes a
 * request's trace when its last reference goes.
 */
class TraceTree {
  readonly parts: string[] = [];
  open = 0;

  constructor(
    readonly sink: TraceSink,
    readonly level: number,
  ) {}

  finish(trace: Trace): void {
    if (trace.events.length > 0) this.parts.push(trace.events.join(","));
    if (--this.open === 0) this.sink.collect(this.parts.join(","));
  }
}

let lastId = 0;

/**
 * One trace (Triton's `InferenceTrace`, mode `triton`): the objects of its part of the trace file
 * in the order they were captured — the model's `{"id","model_name","model_version"[,"request_id"]
 * [,"parent_id"]}` when the core starts the request, then one `{"id","timestamps":[{"name","ns"}]}`
 * per timestamp, in steady-clock nanoseconds (`process.hrtime`, CLOCK_MONOTONIC like Triton's
 * `steady_clock`). Ids come from one process-wide counter that children share.
 */
export class Trace {
  readonly id: number;
  readonly events: string[] = [];
  readonly #tree: TraceTree;
  #ended = false;

  /** A root trace for a request sampled by `sink`'s setting. */
  static root(sink: TraceSink, level: number): Trace {
    return new Trace(new TraceTree(sink, level), 0);
  }

  private constructor(
    tree: TraceTree,
    readonly parentId: number,
  ) {
    this.id = ++lastId;
    this.#tree = tree;
    tree.open++;
  }

  /** Whether timestamps are recorded (level TIMESTAMPS); a TENSORS-only trace records none. */
  get timestamps(): boolean {
    return (this.#tree.level & TRACE_TIMESTAMPS) !== 0;
  }

  /** Whether tensors are recorded (level TENSORS). */
  get tensors(): boolean {
    return (this.#tree.level & TRACE_TENSORS) !== 0;
  }

  /** Record `tensors` as `activity` (`TENSOR_QUEUE_INPUT`, `TENSOR_BACKEND_OUTPUT`) at level TENSORS. */
  captureTensors(activity: string, tensors: readonly Tensor[]): void {
    if (!this.tensors || this.#ended) return;
    for (const tensor of tensors) this.events.push(tensorTraceJson(this.id, activity, tensor));
  }

  /** A child trace (an ensemble step, a BLS call): a new id, this one's as its `parent_id`. */
  child(): Trace {
    return new Trace(this.#tree, this.id);
  }

  /** The request reached the core for `model` version `version`: the model object, then REQUEST_START. */
  start(model: string, version: number, requestId: string, ns: bigint = now()): void {
    if (!this.timestamps) return;
    // Escaped, unlike Triton's (which writes them raw): a request id is the client's text.
    const id = requestId === "" ? "" : `,"request_id":${JSON.stringify(requestId)}`;
    const parent = this.parentId === 0 ? "" : `,"parent_id":${this.parentId}`;
    this.events.push(
      `{"id":${this.id},"model_name":${JSON.stringify(model)},"model_version":${version}${id}${parent}}`,
    );
    this.capture("REQUEST_START", ns);
  }

  /** Record the timestamp `name` (e.g. `QUEUE_START`), now unless `ns` is given. */
  capture(name: string, ns: bigint = now()): void {
    if (!this.timestamps || this.#ended) return;
    this.events.push(`{"id":${this.id},"timestamps":[{"name":"${name}","ns":${ns}}]}`);
  }

  /** This trace is complete; the tree is written when its last trace ends. Idempotent. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#tree.finish(this);
  }
}

/** The four compute timestamps of a traced request, from its batch's execution times. */
export function captureCompute(
  trace: Trace,
  startNs: bigint,
  endNs: bigint,
  result: { computeInputNs: bigint; computeOutputNs: bigint },
): void {
  // The durations come from the instance (maybe another thread); kept in order within [start, end].
  const inputEnd = min(startNs + result.computeInputNs, endNs);
  const outputStart = max(endNs - result.computeOutputNs, inputEnd);
  trace.capture("COMPUTE_START", startNs);
  trace.capture("COMPUTE_INPUT_END", inputEnd);
  trace.capture("COMPUTE_OUTPUT_START", outputStart);
  trace.capture("COMPUTE_END", endNs);
}

const min = (a: bigint, b: bigint) => (a < b ? a : b);
const max = (a: bigint, b: bigint) => (a > b ? a : b);
