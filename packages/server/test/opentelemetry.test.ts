// The trace extension's mode `opentelemetry`: spans of real requests through a real server,
// exported over OTLP/HTTP to a real receiver (test/support/otlp-receiver.ts, decoding with the
// official OTLP protobuf definitions) — parents across a caller's W3C traceparent (HTTP and
// gRPC), ensemble steps and BLS calls (JS and Python, with the context handed to the model),
// the order of the events, rate and count, hostile headers, and a receiver that is down.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import type { TraceConfig } from "../src/core/trace-settings.js";
import { copyPythonModels, pythonWithNumpy } from "./python-harness.js";
import {
  bytesTensor,
  cleanup,
  fp32Bytes,
  int32Bytes,
  type Running,
  range,
  recordingLog,
  simpleRequest,
  startServer,
  tempRepository,
} from "./support/harness.js";
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from "./support/otlp-receiver.js";

const receivers: OtlpReceiver[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
  await cleanup();
  for (const r of receivers.splice(0)) await r.close();
});

async function receiver(options: Parameters<typeof startOtlpReceiver>[0] = {}): Promise<OtlpReceiver> {
  const r = await startOtlpReceiver(options);
  receivers.push(r);
  return r;
}

/** Mode opentelemetry to `url`, exporting every 20 ms. */
function otel(url: string, trace: Partial<TraceConfig> = {}, bsp: Partial<TraceConfig["opentelemetry"]> = {}) {
  return {
    level: 0x4,
    rate: 1,
    ...trace,
    mode: "opentelemetry" as const,
    opentelemetry: {
      url,
      resource: [["service.name", "galley-test"] as const],
      bspMaxQueueSize: 2048,
      bspScheduleDelay: 20,
      bspMaxExportBatchSize: 512,
      ...bsp,
    },
  };
}

const CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN = "b7ad6b7169203331";
const TRACEPARENT = `00-${CALLER_TRACE}-${CALLER_SPAN}-01`;

const simpleJson = {
  inputs: [
    { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: range(16) },
    { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: range(16) },
  ],
};

function post(s: Running, model: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${s.httpUrl}/v2/models/${model}/infer`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

const byName = (spans: readonly ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);
const childrenOf = (spans: readonly ReceivedSpan[], parent: ReceivedSpan) =>
  spans.filter((s) => s.parentSpanId === parent.spanId && s.traceId === parent.traceId);
const one = <T>(list: readonly T[], what: string): T => {
  expect(list, what).toHaveLength(1);
  return list[0] as T;
};

/** The span's events are these, in this order of time (each no earlier than the one before). */
function expectEvents(span: ReceivedSpan, names: readonly string[]): void {
  expect(
    span.events.map((e) => e.name),
    span.name,
  ).toEqual(names);
  for (let i = 1; i < span.events.length; i++)
    expect(span.events[i]?.ns as bigint, `${span.name}: ${names[i]}`).toBeGreaterThanOrEqual(
      span.events[i - 1]?.ns as bigint,
    );
  expect(span.startNs).toBeLessThanOrEqual(span.events[0]?.ns ?? span.startNs);
  expect(span.endNs).toBeGreaterThanOrEqual(span.events.at(-1)?.ns ?? span.endNs);
}

/** `child` lies within `parent` in time. */
function expectWithin(child: ReceivedSpan, parent: ReceivedSpan): void {
  expect(child.startNs, `${child.name} starts within ${parent.name}`).toBeGreaterThanOrEqual(parent.startNs);
  expect(child.endNs, `${child.name} ends within ${parent.name}`).toBeLessThanOrEqual(parent.endNs);
}

const MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"];
const COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"];

describe("mode opentelemetry", () => {
  it("exports a REST request as Triton's spans, children of the caller's span, with its tracestate", async () => {
    const r = await receiver();
    const s = await startServer({ http: true, controlMode: "explicit", loadModels: ["simple"], trace: otel(r.url) });
    const res = await post(
      s,
      "simple",
      { id: "rest-1", ...simpleJson },
      { traceparent: TRACEPARENT, tracestate: "vendor=1" },
    );
    expect(res.status).toBe(200);
    await r.waitFor((spans) => spans.length >= 3);
    const spans = r.spans;
    expect(spans.every((s) => s.traceId === CALLER_TRACE)).toBe(true);
    const root = one(byName(spans, "InferRequest"), "InferRequest");
    expect(root.parentSpanId).toBe(CALLER_SPAN);
    expect(root.traceState).toBe("vendor=1");
    expect(root.kind).toBe("SPAN_KIND_SERVER");
    expect(root.scope).toBe("triton-server");
    expect(root.resource["service.name"]).toBe("galley-test");
    expect(root.events.map((e) => e.name)).toEqual([
      "HTTP_RECV_START",
      "HTTP_RECV_END",
      "INFER_RESPONSE_COMPLETE",
      "HTTP_SEND_START",
      "HTTP_SEND_END",
    ]);
    const model = one(byName(spans, "simple"), "model span");
    expect(model.parentSpanId).toBe(root.spanId);
    expect(model.attributes).toMatchObject({
      "triton.model_name": "simple",
      "triton.model_version": 1,
      "triton.request_id": "rest-1",
      "triton.trace_parent_id": 0,
    });
    expect(typeof model.attributes["triton.trace_id"]).toBe("number");
    expectEvents(model, MODEL_EVENTS);
    expectWithin(model, root);
    const compute = one(childrenOf(spans, model), "compute span");
    expect(compute.name).toBe("compute");
    expectEvents(compute, COMPUTE_EVENTS);
    expectWithin(compute, model);
    // Receipt before the core's start; sending after its end.
    expect(root.events[1]?.ns as bigint).toBeLessThanOrEqual(model.startNs);
    expect(root.events[3]?.ns as bigint).toBeGreaterThanOrEqual(model.endNs);
    expect(r.contentTypes.every((t) => t === "application/x-protobuf")).toBe(true);
    // The settings API reports the mode and its settings.
    const settings = (await (await fetch(`${s.httpUrl}/v2/trace/setting`)).json()) as Record<string, unknown>;
    expect(settings).toMatchObject({ trace_mode: "opentelemetry", trace_rate: "1", trace_level: ["TIMESTAMPS"] });
    expect(settings).not.toHaveProperty("trace_file");
    expect(settings).toMatchObject({ url: r.url, bsp_schedule_delay: "20" });
    // The API changes level, rate and count as in mode triton; a file is still not settable.
    const update = await fetch(`${s.httpUrl}/v2/models/simple/trace/setting`, {
      method: "POST",
      body: JSON.stringify({ trace_rate: "7" }),
    });
    expect(await update.json()).toMatchObject({ trace_rate: "7", trace_mode: "opentelemetry" });
    const file = await fetch(`${s.httpUrl}/v2/trace/setting`, { method: "POST", body: '{"trace_file":"/tmp/x"}' });
    expect(file.status).toBe(501);
  });

  it("reads traceparent from gRPC metadata; an ensemble's steps are children of the ensemble's span", async () => {
    const r = await receiver();
    const s = await startServer({
      controlMode: "explicit",
      loadModels: ["simple", "ensemble_add_sub"],
      trace: otel(r.url),
    });
    await s.client.modelInfer(
      {
        modelName: "ensemble_add_sub",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
          { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
        ],
        rawInputContents: [int32Bytes(range(16)), int32Bytes(range(16))],
      },
      { headers: { traceparent: TRACEPARENT } },
    );
    // 1 InferRequest + the ensemble's span + 6 steps, each with its compute span.
    await r.waitFor((spans) => spans.length >= 14);
    const spans = r.spans;
    const root = one(byName(spans, "InferRequest"), "InferRequest");
    expect(root.parentSpanId).toBe(CALLER_SPAN);
    expect(root.events.map((e) => e.name)).toEqual([
      "GRPC_WAITREAD_START",
      "GRPC_WAITREAD_END",
      "INFER_RESPONSE_COMPLETE",
      "GRPC_SEND_START",
      "GRPC_SEND_END",
    ]);
    const ensemble = one(byName(spans, "ensemble_add_sub"), "ensemble span");
    expect(ensemble.parentSpanId).toBe(root.spanId);
    expectEvents(ensemble, MODEL_EVENTS);
    const steps = childrenOf(spans, ensemble);
    expect(steps.map((st) => st.name)).toEqual(Array(6).fill("simple"));
    for (const step of steps) {
      expect(step.attributes["triton.trace_parent_id"]).toBe(ensemble.attributes["triton.trace_id"]);
      expectEvents(step, MODEL_EVENTS);
      expectWithin(step, ensemble);
      const compute = one(childrenOf(spans, step), "step compute");
      expectEvents(compute, COMPUTE_EVENTS);
      expectWithin(compute, step);
    }
    expect(childrenOf(spans, ensemble).some((c) => c.name === "compute")).toBe(false);
  });

  it("reads traceparent on every gRPC path: gRPC-Web through connect-node, and each request of a ModelStreamInfer", async () => {
    const r = await receiver();
    const s = await startServer({ controlMode: "explicit", loadModels: ["simple"], trace: otel(r.url, { rate: 0 }) });
    const web = createClient(GRPCInferenceService, createGrpcWebTransport({ baseUrl: s.grpcUrl, httpVersion: "2" }));
    await web.modelInfer(simpleRequest(range(16), range(16), { id: "web" }), { headers: { traceparent: TRACEPARENT } });
    async function* two() {
      yield simpleRequest(range(16), range(16), { id: "stream-1" });
      yield simpleRequest(range(16), range(16), { id: "stream-2" });
    }
    const streamed = `00-${"3".repeat(32)}-${"4".repeat(16)}-01`;
    for await (const _ of s.client.modelStreamInfer(two(), { headers: { traceparent: streamed } })) void _;
    // Roots end after their model spans: they may come in a later export.
    await r.waitFor((spans) => byName(spans, "simple").length >= 3 && byName(spans, "InferRequest").length >= 3);
    const traceOf = (id: string) => byName(r.spans, "simple").find((m) => m.attributes["triton.request_id"] === id);
    expect(traceOf("web")?.traceId).toBe(CALLER_TRACE);
    expect([traceOf("stream-1")?.traceId, traceOf("stream-2")?.traceId]).toEqual(["3".repeat(32), "3".repeat(32)]);
    const roots = byName(r.spans, "InferRequest");
    expect(roots.map((root) => root.parentSpanId).sort()).toEqual([CALLER_SPAN, "4".repeat(16), "4".repeat(16)].sort());
  });

  it("makes a JS model's BLS call a child of the model's span, and hands the model its W3C context", async () => {
    const r = await receiver();
    const repo = tempRepository(["add_sub", "bls_sync"]);
    const dir = join(repo, "trace_context", "1");
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(repo, "trace_context", "config.pbtxt"),
      'name: "trace_context"\nbackend: "js"\nmax_batch_size: 0\n' +
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n' +
        'output [ { name: "CONTEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
    );
    writeFileSync(
      join(dir, "model.mjs"),
      `export default class TraceContext {
  execute(requests) {
    return requests.map((request) => ({
      outputs: [{ name: "CONTEXT", datatype: "BYTES", shape: [1], data: [JSON.stringify(request.traceContext ?? null)] }],
    }));
  }
}
`,
    );
    const s = await startServer({ modelRepositories: [repo], trace: otel(r.url) });
    expect(s.failedModels).toEqual([]);
    await s.client.modelInfer({
      modelName: "bls_sync",
      inputs: [
        { name: "MODEL_NAME", datatype: "BYTES", shape: [1n] },
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [bytesTensor(["add_sub"]), fp32Bytes([1, 2, 3, 4]), fp32Bytes([10, 20, 30, 40])],
    });
    const reply = await s.client.modelInfer({
      modelName: "trace_context",
      inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
      rawInputContents: [int32Bytes([1])],
    });
    await r.waitFor((spans) => byName(spans, "InferRequest").length >= 2 && byName(spans, "trace_context").length >= 1);
    const spans = r.spans;
    const bls = one(byName(spans, "bls_sync"), "bls_sync span");
    const call = one(byName(spans, "add_sub"), "add_sub span");
    expect(call.parentSpanId).toBe(bls.spanId);
    expect(call.traceId).toBe(bls.traceId);
    expectWithin(call, bls);
    const blsCompute = one(
      childrenOf(spans, bls).filter((c) => c.name === "compute"),
      "bls_sync compute",
    );
    expect(call.startNs).toBeGreaterThanOrEqual(blsCompute.startNs);
    expect(call.endNs).toBeLessThanOrEqual(blsCompute.endNs);
    // The model saw its own span's context: a new trace (no caller), sampled.
    const model = one(byName(spans, "trace_context"), "trace_context span");
    const raw = reply.rawOutputContents[0] as Uint8Array;
    const seen = JSON.parse(Buffer.from(raw.subarray(4)).toString("utf8")) as { traceparent: string };
    expect(seen).toEqual({ traceparent: `00-${model.traceId}-${model.spanId}-01` });
  });

  it("makes a Python model's BLS call (trace=request.trace()) a child of its span; get_context() gives it", async () => {
    const r = await receiver();
    const repo = tempRepository();
    copyPythonModels(repo, ["add_sub", "bls_trace_context"]);
    const s = await startServer({ modelRepositories: [repo], pythonExecutable: pythonWithNumpy(), trace: otel(r.url) });
    expect(s.failedModels).toEqual([]);
    const reply = await s.client.modelInfer(
      {
        modelName: "bls_trace_context",
        inputs: [
          { name: "INPUT0", datatype: "FP32", shape: [4n] },
          { name: "INPUT1", datatype: "FP32", shape: [4n] },
        ],
        rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([1, 1, 1, 1])],
      },
      { headers: { traceparent: TRACEPARENT, tracestate: "vendor=2" } },
    );
    await r.waitFor((spans) => byName(spans, "InferRequest").length >= 1 && byName(spans, "add_sub").length >= 1);
    const spans = r.spans;
    const parent = one(byName(spans, "bls_trace_context"), "bls_trace_context span");
    const call = one(byName(spans, "add_sub"), "add_sub span");
    expect(parent.traceId).toBe(CALLER_TRACE);
    expect(call.parentSpanId).toBe(parent.spanId);
    expect(call.traceId).toBe(CALLER_TRACE);
    expectWithin(call, parent);
    expectEvents(one(childrenOf(spans, call), "add_sub compute"), COMPUTE_EVENTS);
    const raw = reply.rawOutputContents[1] as Uint8Array;
    const context = JSON.parse(Buffer.from(raw.subarray(4)).toString("utf8")) as Record<string, string>;
    expect(context).toEqual({ traceparent: `00-${CALLER_TRACE}-${parent.spanId}-01`, tracestate: "vendor=2" });
  });

  it("traces a video job as one trace under the traceparent it was created with: the pipeline and its BLS calls", async () => {
    const r = await receiver();
    const repo = tempRepository(["add_sub"]);
    mkdirSync(join(repo, "clip", "1"), { recursive: true });
    writeFileSync(
      join(repo, "clip", "config.pbtxt"),
      `name: "clip"
backend: "js"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "STEP", data_type: TYPE_INT32, dims: [ 2 ] }, { name: "CLIP", data_type: TYPE_UINT8, dims: [ -1, -1, -1, 3 ] } ]
parameters { key: "videos_api.prompt_input", value: { string_value: "TEXT" } }
parameters { key: "videos_api.progress_output", value: { string_value: "STEP" } }
parameters { key: "videos_api.video_output", value: { string_value: "CLIP" } }
`,
    );
    // One BLS call, then the video: a step of a pipeline as the example's loop makes them.
    writeFileSync(
      join(repo, "clip", "1", "model.mjs"),
      `export default class {
  async execute(requests, context) {
    for (const request of requests) {
      const four = { datatype: "FP32", shape: [4], data: Float32Array.of(1, 2, 3, 4) };
      await context.infer({ model: "add_sub", inputs: [{ name: "INPUT0", ...four }, { name: "INPUT1", ...four }], outputs: ["OUTPUT0"] });
      request.responseSender().send({ outputs: [
        { name: "STEP", datatype: "INT32", shape: [2], data: Int32Array.of(1, 1) },
        { name: "CLIP", datatype: "UINT8", shape: [1, 2, 2, 3], data: new Uint8Array(12) },
      ] }, { final: true });
    }
  }
}
`,
    );
    // Rate 1000: only a job created with a caller's context is traced.
    const s = await startServer({
      modelRepositories: [repo],
      http: true,
      jobs: { jobsDir: tempRepository(), ffmpeg: false },
      trace: otel(r.url, { rate: 1000 }),
    });
    expect(s.failedModels).toEqual([]);
    const create = async (headers: Record<string, string>): Promise<string> => {
      const res = await fetch(`${s.httpUrl}/v1/videos`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify({ model: "clip", prompt: "p" }),
      });
      expect(res.status).toBe(200);
      const id = ((await res.json()) as { id: string }).id;
      for (;;) {
        const video = (await (await fetch(`${s.httpUrl}/v1/videos/${id}`)).json()) as { status: string };
        if (video.status === "completed") return id;
        expect(["queued", "in_progress"]).toContain(video.status);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const traced = await create({ traceparent: TRACEPARENT, tracestate: "vendor=5" });
    await create({});
    await create({ traceparent: "00-not-a-trace-01" });
    await s.close();
    const spans = r.spans;
    const root = one(byName(spans, "InferRequest"), "one traced job");
    expect([root.traceId, root.parentSpanId]).toEqual([CALLER_TRACE, CALLER_SPAN]);
    const pipeline = one(childrenOf(spans, root), "the pipeline's span");
    expect([pipeline.name, pipeline.attributes["triton.request_id"]]).toEqual(["clip", traced]);
    const call = one(byName(spans, "add_sub"), "its BLS call");
    expect([call.traceId, call.parentSpanId]).toEqual([CALLER_TRACE, pipeline.spanId]);
    expectWithin(call, pipeline);
    expectEvents(pipeline, MODEL_EVENTS);
  });

  it("samples every rate-th request while count lasts; a request with a caller's context is traced whatever they say", async () => {
    const r = await receiver();
    const s = await startServer({
      http: true,
      controlMode: "explicit",
      loadModels: ["simple"],
      trace: otel(r.url, { rate: 2, count: 2 }),
    });
    for (let i = 1; i <= 8; i++)
      expect((await post(s, "simple", { id: `plain-${i}`, ...simpleJson })).status).toBe(200);
    const caller = `00-${"1".repeat(32)}-${"2".repeat(16)}-00`;
    expect((await post(s, "simple", { id: "with-context", ...simpleJson }, { traceparent: caller })).status).toBe(200);
    // The request's root span ends after its model span: it may come in a later export.
    await r.waitFor(
      (spans) =>
        byName(spans, "simple").length >= 3 &&
        byName(spans, "InferRequest").some((root) => root.traceId === "1".repeat(32)),
    );
    const ids = byName(r.spans, "simple").map((m) => m.attributes["triton.request_id"]);
    expect(ids).toEqual(["plain-2", "plain-4", "with-context"]);
    // The caller's unsampled flag does not stop it (Triton traces every propagated context).
    const forced = byName(r.spans, "InferRequest").find((root) => root.traceId === "1".repeat(32));
    expect(forced?.parentSpanId).toBe("2".repeat(16));
    // The count left shows in the settings API.
    const settings = (await (await fetch(`${s.httpUrl}/v2/trace/setting`)).json()) as Record<string, unknown>;
    expect(settings.trace_count).toBe("0");
  });

  it("with rate=0 traces only requests that carry a context; malformed traceparent headers are ignored (W3C)", async () => {
    const r = await receiver();
    const s = await startServer({
      http: true,
      controlMode: "explicit",
      loadModels: ["simple"],
      trace: otel(r.url, { rate: 0 }),
    });
    const hostile = [
      "",
      "garbage",
      `00-${CALLER_TRACE}-${CALLER_SPAN}`,
      `00-${"0".repeat(32)}-${CALLER_SPAN}-01`,
      `00-${CALLER_TRACE}-${"0".repeat(16)}-01`,
      `ff-${CALLER_TRACE}-${CALLER_SPAN}-01`,
      `00-${CALLER_TRACE.toUpperCase()}-${CALLER_SPAN}-01`,
      `00-${CALLER_TRACE}-${CALLER_SPAN}-01-extra`,
      `00-${CALLER_TRACE}x-${CALLER_SPAN}-01`,
      `${"0".repeat(8000)}`,
    ];
    for (const [i, traceparent] of hostile.entries()) {
      const res = await post(s, "simple", { id: `hostile-${i}`, ...simpleJson }, { traceparent, tracestate: "a=,,=" });
      expect(res.status, traceparent.slice(0, 40)).toBe(200);
    }
    // Over gRPC too, with a metadata value that is no traceparent at all.
    await s.client.modelInfer(simpleRequest(range(16), range(16), { id: "grpc-hostile" }), {
      headers: { traceparent: "00-not-a-trace-01", tracestate: "x" },
    });
    expect((await post(s, "simple", { id: "valid", ...simpleJson }, { traceparent: TRACEPARENT })).status).toBe(200);
    await r.waitFor((spans) => byName(spans, "simple").length >= 1);
    await s.close();
    expect(byName(r.spans, "simple").map((m) => m.attributes["triton.request_id"])).toEqual(["valid"]);
  });

  it("never fails or holds a request when the receiver is down or never answers; dropped spans are counted and logged", async () => {
    // A port nothing listens on.
    const closed = createHttpServer();
    await new Promise<void>((ready) => closed.listen(0, "127.0.0.1", ready));
    const { port } = closed.address() as AddressInfo;
    await new Promise((done) => closed.close(done));
    const hung = await receiver({ hold: true });
    for (const url of [`127.0.0.1:${port}/v1/traces`, hung.url]) {
      const { log, lines } = recordingLog();
      const s = await startServer({
        http: true,
        controlMode: "explicit",
        loadModels: ["simple"],
        log,
        exitTimeoutSecs: 1,
        trace: otel(url, {}, { bspMaxQueueSize: 8, bspMaxExportBatchSize: 4, bspScheduleDelay: 5 }),
      });
      const started = performance.now();
      for (let i = 0; i < 20; i++) expect((await post(s, "simple", simpleJson)).status).toBe(200);
      // Twenty requests on a CPU model: seconds would mean they waited on the exporter.
      expect(performance.now() - started).toBeLessThan(5000);
      const closing = performance.now();
      await s.close();
      // Within the grace period (1 s) plus the least flush time (1 s), whatever the receiver does.
      expect(performance.now() - closing).toBeLessThan(4000);
      expect(lines.join("\n"), url).toMatch(/OpenTelemetry trace export dropped \d+ spans/);
    }
  });

  it("galley serve exports the spans still queued when SIGTERM stops it", async () => {
    const r = await receiver();
    const run = await serve(
      tempRepository(["simple"]),
      [
        `--trace-config=opentelemetry,url=${r.url.replace("http://", "")}`,
        "--trace-config=opentelemetry,resource=service.name=galley-sigterm",
        // Nothing is exported on schedule during the test: only the shutdown's flush sends them.
        "--trace-config=opentelemetry,bsp_schedule_delay=600000",
      ],
      { OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=ci,service.name=from-env" },
    );
    for (let i = 0; i < 3; i++) expect((await run.infer(`before-sigterm-${i}`)).status).toBe(200);
    expect(r.spans).toHaveLength(0);
    run.child.kill("SIGTERM");
    expect(await run.exited, run.output()).toBe(0);
    expect(
      byName(r.spans, "simple")
        .map((m) => m.attributes["triton.request_id"])
        .sort(),
    ).toEqual(["before-sigterm-0", "before-sigterm-1", "before-sigterm-2"]);
    expect(byName(r.spans, "InferRequest")).toHaveLength(3);
    // The flag's service name wins over the environment's; the environment's other attributes stay.
    expect(r.spans.every((span) => span.resource["service.name"] === "galley-sigterm")).toBe(true);
    expect(r.spans[0]?.resource["deployment.environment"]).toBe("ci");
  });

  it("galley serve still stops within --exit-timeout-secs, exit 0, when the receiver never answers", async () => {
    const hung = await receiver({ hold: true });
    const run = await serve(tempRepository(["simple"]), [
      `--trace-config=opentelemetry,url=${hung.url}`,
      "--trace-config=opentelemetry,bsp_schedule_delay=1",
    ]);
    for (let i = 0; i < 5; i++) expect((await run.infer(`held-${i}`)).status).toBe(200);
    const stopping = performance.now();
    run.child.kill("SIGTERM");
    expect(await run.exited, run.output()).toBe(0);
    expect(performance.now() - stopping).toBeLessThan(2000 + 1000);
    expect(run.output()).toMatch(/OpenTelemetry trace export dropped 15 spans \(not exported at shutdown\); 15 in all/);
    expect(run.output()).not.toMatch(/exit timeout of 2 s expired/);
  });
});

/** `galley serve` (the built CLI) over `repo`, mode opentelemetry at rate 1, exit timeout 2 s, plus `args`. */
async function serve(repo: string, args: string[], env: Record<string, string> = {}) {
  const cli = fileURLToPath(new URL("../dist/cli/galley.js", import.meta.url));
  const child = spawn(
    process.execPath,
    [
      cli,
      "serve",
      `--model-repository=${repo}`,
      "--http-address=127.0.0.1",
      "--http-port=0",
      "--grpc-port=0",
      "--metrics-port=0",
      "--exit-timeout-secs=2",
      "--trace-config=mode=opentelemetry",
      "--trace-config=level=TIMESTAMPS",
      "--trace-config=rate=1",
      ...args,
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } },
  );
  children.push(child);
  let output = "";
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
  const address = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk;
      const match = /Started HTTPService at (\S+)/.exec(output);
      if (match) resolve(match[1] as string);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    void exited.then(() => reject(new Error(`galley serve exited:\n${output}`)));
  });
  const infer = (id: string) =>
    fetch(`http://${address}/v2/models/simple/infer`, { method: "POST", body: JSON.stringify({ id, ...simpleJson }) });
  return { child, exited, infer, output: () => output };
}
