import { trace as api, ROOT_CONTEXT } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { describe, expect, it } from "vitest";
import { now } from "../base/clock.js";
import { TRACE_TENSORS, TRACE_TIMESTAMPS } from "../base/trace.js";
import { SpanTrace } from "./span-trace.js";

function provider() {
  const exporter = new InMemorySpanExporter();
  const tracer = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).getTracer("t");
  const spans = () => exporter.getFinishedSpans();
  return { tracer, spans };
}

describe("SpanTrace", () => {
  it("ends the InferRequest span when the last trace of the request ends, children first", () => {
    const { tracer, spans } = provider();
    const root = SpanTrace.root(tracer, TRACE_TIMESTAMPS);
    root.start("ensemble", 1, "r");
    const step = root.child();
    step.start("simple", 1, "");
    expect(step.parentId).toBe(root.id);
    root.capture("REQUEST_END");
    root.end();
    // The step is still open: nothing but the ensemble's span has ended.
    expect(spans().map((s) => s.name)).toEqual(["ensemble"]);
    step.capture("REQUEST_END");
    step.end();
    const [ensemble, simple, request] = spans();
    expect(spans().map((s) => s.name)).toEqual(["ensemble", "simple", "InferRequest"]);
    expect(simple?.parentSpanContext?.spanId).toBe(ensemble?.spanContext().spanId);
    expect(ensemble?.parentSpanContext?.spanId).toBe(request?.spanContext().spanId);
    expect(simple?.attributes).toMatchObject({ "triton.trace_parent_id": root.id, "triton.trace_id": step.id });
  });

  it("ends a request that failed before REQUEST_END, and keeps events after an end out", () => {
    const { tracer, spans } = provider();
    const root = SpanTrace.root(tracer, TRACE_TIMESTAMPS);
    root.start("m", 1, "");
    root.capture("COMPUTE_START");
    root.end();
    root.capture("QUEUE_START");
    expect(spans().map((s) => s.name)).toEqual(["compute", "m", "InferRequest"]);
    expect(spans().every((s) => s.ended)).toBe(true);
    expect(spans()[1]?.events.map((e) => e.name)).toEqual(["REQUEST_START"]);
  });

  it("gives the model span's W3C context, with the caller's trace id and tracestate", () => {
    const { tracer, spans } = provider();
    const caller = api.setSpanContext(ROOT_CONTEXT, {
      traceId: "0af7651916cd43dd8448eb211c80319c",
      spanId: "b7ad6b7169203331",
      traceFlags: 1,
      isRemote: true,
    });
    const root = SpanTrace.root(tracer, TRACE_TIMESTAMPS, caller, now());
    expect(root.context).toBeUndefined();
    root.start("m", 1, "");
    const context = JSON.parse(root.context as string) as { traceparent: string };
    root.end();
    const model = spans().find((s) => s.name === "m");
    expect(context).toEqual({ traceparent: `00-0af7651916cd43dd8448eb211c80319c-${model?.spanContext().spanId}-01` });
  });

  it("records no model span at level TENSORS alone (Triton's mode has no tensors)", () => {
    const { tracer, spans } = provider();
    const root = SpanTrace.root(tracer, TRACE_TENSORS);
    root.start("m", 1, "");
    root.captureTensors("TENSOR_QUEUE_INPUT", []);
    root.capture("REQUEST_END");
    root.end();
    expect(spans().map((s) => s.name)).toEqual(["InferRequest"]);
    expect(root.context).toBeUndefined();
  });
});
