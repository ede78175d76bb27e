import { now } from "./clock.js";
import type { Tensor } from "./tensor.js";
import { tensorTraceJson } from "./trace-tensor.js";

/** Trace levels, Triton's bits: `TIMESTAMPS` 0x4, `TENSORS` 0x8; 0 is `OFF`. */
export const TRACE_TIMESTAMPS = 0x4;
export const TRACE_TENSORS = 0x8;

/** The core's timestamps of one request, in the order they happen (the frontends' come around them). */
export const CORE_TIMESTAMPS = [
  "REQUEST_START",
  "QUEUE_START",
  "COMPUTE_START",
  "COMPUTE_INPUT_END",
  "COMPUTE_OUTPUT_START",
  "COMPUTE_END",
  "REQUEST_END",
] as const;

/**
 * Where a caller's trace context is read: `header` gives a request header (HTTP) or metadata
 * entry (gRPC) by lower-case name, or undefined when absent. An HTTP request is one as it is.
 */
export interface TraceHeader {
  header(name: string): string | undefined;
}

/** Where a finished trace tree goes (the setting that sampled it), mode `triton`. */
export interface TraceSink {
  /** The tree's objects, `,`-joined JSON, once its root and every child have ended. */
  collect(text: string): void;
}

let lastId = 0;

/**
 * One trace (Triton's `InferenceTrace`): what the core and the frontends tell about one request
 * (an ensemble step and a BLS call are child traces of their parent's). Ids come from one
 * process-wide counter that children share. Timestamps are steady-clock nanoseconds
 * (`process.hrtime`, CLOCK_MONOTONIC like Triton's `steady_clock`). Where the events go is the
 * mode's: Triton's JSON objects for the trace file, or OpenTelemetry spans.
 */
export abstract class Trace {
  readonly id: number;
  #ended = false;

  protected constructor(
    readonly parentId: number,
    readonly level: number,
  ) {
    this.id = ++lastId;
  }

  /** Whether timestamps are recorded (level TIMESTAMPS); a TENSORS-only trace records none. */
  get timestamps(): boolean {
    return (this.level & TRACE_TIMESTAMPS) !== 0;
  }

  /** Whether tensors are recorded (level TENSORS). */
  get tensors(): boolean {
    return (this.level & TRACE_TENSORS) !== 0;
  }

  /** Whether {@link end} was called. */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * The W3C trace context of this request's span for the model to hand on (Triton's
   * `TRITONSERVER_InferenceTraceContext`): `{"traceparent":…[,"tracestate":…]}` as JSON, in mode
   * `opentelemetry` once the request has started; undefined otherwise.
   */
  get context(): string | undefined {
    return undefined;
  }

  /** Record `tensors` as `activity` (`TENSOR_QUEUE_INPUT`, `TENSOR_BACKEND_OUTPUT`) at level TENSORS. */
  abstract captureTensors(activity: string, tensors: readonly Tensor[]): void;

  /** A child trace (an ensemble step, a BLS call): a new id, this one's as its `parent_id`. */
  abstract child(): Trace;

  /** The request reached the core for `model` version `version` (REQUEST_START at `ns`). */
  abstract start(model: string, version: number, requestId: string, ns?: bigint): void;

  /** Record the timestamp `name` (e.g. `QUEUE_START`), now unless `ns` is given. */
  abstract capture(name: string, ns?: bigint): void;

  /** This trace is complete; the tree is written when its last trace ends. Idempotent. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.finish();
  }

  /** What the mode does when this trace ends (once). */
  protected abstract finish(): void;
}

/**
 * The traces of one sampled request, mode `triton`: the root and the children the core spawned
 * for it. Written as one piece when the last of them ends, as Triton writes a request's trace
 * when its last reference goes.
 */
class TraceTree {
  readonly parts: string[] = [];
  open = 0;

  constructor(readonly sink: TraceSink) {}

  finish(trace: FileTrace): void {
    if (trace.events.length > 0) this.parts.push(trace.events.join(","));
    if (--this.open === 0) this.sink.collect(this.parts.join(","));
  }
}

/**
 * A trace of mode `triton`: the objects of its part of the trace file in the order they were
 * captured — the model's `{"id","model_name","model_version"[,"request_id"][,"parent_id"]}`
 * when the core starts the request, then one `{"id","timestamps":[{"name","ns"}]}` per timestamp.
 */
export class FileTrace extends Trace {
  readonly events: string[] = [];
  readonly #tree: TraceTree;

  /** A root trace for a request sampled by `sink`'s setting. */
  static root(sink: TraceSink, level: number): FileTrace {
    return new FileTrace(new TraceTree(sink), 0, level);
  }

  private constructor(tree: TraceTree, parentId: number, level: number) {
    super(parentId, level);
    this.#tree = tree;
    tree.open++;
  }

  captureTensors(activity: string, tensors: readonly Tensor[]): void {
    if (!this.tensors || this.ended) return;
    for (const tensor of tensors) this.events.push(tensorTraceJson(this.id, activity, tensor));
  }

  child(): FileTrace {
    return new FileTrace(this.#tree, this.id, this.level);
  }

  /** The model object, then REQUEST_START. */
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

  capture(name: string, ns: bigint = now()): void {
    if (!this.timestamps || this.ended) return;
    this.events.push(`{"id":${this.id},"timestamps":[{"name":"${name}","ns":${ns}}]}`);
  }

  protected finish(): void {
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
