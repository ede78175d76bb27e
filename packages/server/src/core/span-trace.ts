import { type Context, type HrTime, ROOT_CONTEXT, type Span, SpanKind, type Tracer, trace } from "@opentelemetry/api";
import { now } from "../base/clock.js";
import type { Tensor } from "../base/tensor.js";
import { CORE_TIMESTAMPS, Trace } from "../base/trace.js";

/**
 * Steady-clock nanoseconds to Unix-epoch nanoseconds: OpenTelemetry's timestamps are wall-clock
 * times, Galley's are `process.hrtime` (as Triton adds a `time_offset_` to its steady clock).
 */
const EPOCH_OFFSET_NS = BigInt(Date.now()) * 1_000_000n - now();

function wall(ns: bigint): HrTime {
  const t = ns + EPOCH_OFFSET_NS;
  return [Number(t / 1_000_000_000n), Number(t % 1_000_000_000n)];
}

/** The core's timestamps: events of the model span (or its compute span); the frontends' go to the root span. */
const CORE_EVENTS: ReadonlySet<string> = new Set(CORE_TIMESTAMPS.filter((name) => name !== "REQUEST_START"));

/** The spans of one sampled request: its `InferRequest` span, ended when the last trace of the tree ends. */
class SpanTree {
  open = 0;

  constructor(
    readonly tracer: Tracer,
    readonly root: Span,
  ) {}
}

/**
 * A trace of mode `opentelemetry`, Triton's spans for the same events mode `triton` writes to its
 * file: the request's `InferRequest` span (kind SERVER, a child of the caller's span when the
 * request carried a W3C `traceparent`) holds the frontend's timestamps as events; each model
 * request (the request itself, each ensemble step, each BLS call) is a span named after its model,
 * with `triton.model_name`, `triton.model_version`, `triton.trace_id`, `triton.trace_parent_id`
 * and `triton.request_id` attributes and the REQUEST_START, QUEUE_START and REQUEST_END events,
 * a child of the `InferRequest` span or, for a child trace, of its parent's model span; its
 * execution is a `compute` child span with the four COMPUTE_* events. Times are wall-clock.
 * Tensors are not recorded (Triton's mode has no TENSORS level).
 */
export class SpanTrace extends Trace {
  readonly #tree: SpanTree;
  readonly #parent: SpanTrace | undefined;
  #model: Span | undefined;
  #modelOpen = false;
  #compute: Span | undefined;

  /** The root trace of a request sampled now, a child of `parent` (the caller's context) when given. */
  static root(tracer: Tracer, level: number, parent: Context = ROOT_CONTEXT, ns: bigint = now()): SpanTrace {
    const span = tracer.startSpan("InferRequest", { kind: SpanKind.SERVER, startTime: wall(ns) }, parent);
    return new SpanTrace(new SpanTree(tracer, span), undefined, level);
  }

  private constructor(tree: SpanTree, parent: SpanTrace | undefined, level: number) {
    super(parent?.id ?? 0, level);
    this.#tree = tree;
    this.#parent = parent;
    tree.open++;
  }

  override get context(): string | undefined {
    if (!this.#model) return undefined;
    const { traceId, spanId, traceFlags, traceState } = this.#model.spanContext();
    const flags = traceFlags.toString(16).padStart(2, "0");
    const state = traceState?.serialize() ?? "";
    return JSON.stringify({
      traceparent: `00-${traceId}-${spanId}-${flags}`,
      ...(state === "" ? {} : { tracestate: state }),
    });
  }

  captureTensors(_activity: string, _tensors: readonly Tensor[]): void {}

  child(): SpanTrace {
    return new SpanTrace(this.#tree, this, this.level);
  }

  start(model: string, version: number, requestId: string, ns: bigint = now()): void {
    if (!this.timestamps || this.ended || this.#model) return;
    const at = wall(ns);
    const parent = (this.#parent ? this.#parent.#model : undefined) ?? this.#tree.root;
    this.#model = this.#tree.tracer.startSpan(
      model,
      {
        kind: SpanKind.SERVER,
        startTime: at,
        attributes: {
          "triton.model_name": model,
          "triton.model_version": version,
          "triton.trace_id": this.id,
          "triton.trace_parent_id": this.parentId,
          ...(requestId === "" ? {} : { "triton.request_id": requestId }),
        },
      },
      trace.setSpan(ROOT_CONTEXT, parent),
    );
    this.#modelOpen = true;
    this.#model.addEvent("REQUEST_START", at);
  }

  capture(name: string, ns: bigint = now()): void {
    if (!this.timestamps || this.ended) return;
    const at = wall(ns);
    const model = this.#model;
    if (!CORE_EVENTS.has(name) || !model || !this.#modelOpen) {
      this.#tree.root.addEvent(name, at);
      return;
    }
    if (name === "COMPUTE_START") {
      this.#compute?.end(at);
      this.#compute = this.#tree.tracer.startSpan(
        "compute",
        { kind: SpanKind.SERVER, startTime: at },
        trace.setSpan(ROOT_CONTEXT, model),
      );
    }
    (this.#compute ?? model).addEvent(name, at);
    if (name === "COMPUTE_END") {
      this.#compute?.end(at);
      this.#compute = undefined;
    } else if (name === "REQUEST_END") {
      this.#compute?.end(at);
      this.#compute = undefined;
      model.end(at);
      this.#modelOpen = false;
    }
  }

  protected finish(): void {
    const at = wall(now());
    this.#compute?.end(at);
    if (this.#modelOpen) this.#model?.end(at);
    this.#modelOpen = false;
    if (--this.#tree.open === 0) this.#tree.root.end(at);
  }
}
