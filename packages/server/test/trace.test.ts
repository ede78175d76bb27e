// The trace extension (Triton's, mode `triton`): the settings API over REST and gRPC with Triton's
// update rules and texts, sampling, and the trace file a real server writes for REST, gRPC,
// ensemble and BLS requests.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { CORE_TIMESTAMPS } from "../src/base/trace.js";
import { parseTraceFile, summarizeTraces } from "../src/cli/trace-summary.js";
import type { TraceConfig } from "../src/core/trace-settings.js";
import { copyPythonModels, pythonWithNumpy } from "./python-harness.js";
import {
  bytesTensor,
  cleanup,
  expectGrpcError,
  fp32Bytes,
  int32Bytes,
  type Running,
  range,
  simpleRequest,
  startServer,
  tempRepository,
} from "./support/harness.js";

afterEach(cleanup);
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function traceFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "galley-trace-"));
  dirs.push(dir);
  return join(dir, "trace.json");
}

type TraceObject = { id: number } & Record<string, unknown>;
interface Traced {
  id: number;
  model: string;
  version: number;
  parent?: number;
  requestId?: string;
  /** Timestamp names in the order written, and their values. */
  names: string[];
  ns: Map<string, bigint>;
  /** TENSORS-level objects: `<activity> <name>` → the tensor's fields. */
  tensors: Map<string, { data: string; shape: string; dtype: string }>;
}

/** The traces of a Triton trace file, by id. */
function readTraces(path: string): Map<number, Traced> {
  const text = readFileSync(path, "utf8");
  // Nanosecond values exceed 2^53: read them as text.
  const objects = JSON.parse(text.replace(/"ns":(\d+)/g, '"ns":"$1"')) as TraceObject[];
  const traces = new Map<number, Traced>();
  const of = (id: number) => {
    let t = traces.get(id);
    if (!t) {
      t = { id, model: "", version: 0, names: [], ns: new Map(), tensors: new Map() };
      traces.set(id, t);
    }
    return t;
  };
  for (const object of objects) {
    const t = of(object.id);
    if ("model_name" in object) {
      t.model = object.model_name as string;
      t.version = object.model_version as number;
      if ("parent_id" in object) t.parent = object.parent_id as number;
      if ("request_id" in object) t.requestId = object.request_id as string;
    } else if ("activity" in object) {
      const tensor = object.tensor as { name: string; data: string; shape: string; dtype: string };
      t.tensors.set(`${object.activity} ${tensor.name}`, tensor);
    } else {
      const [stamp] = object.timestamps as { name: string; ns: string }[];
      if (!stamp) throw new Error("a timestamp object without its timestamp");
      t.names.push(stamp.name);
      t.ns.set(stamp.name, BigInt(stamp.ns));
    }
  }
  return traces;
}

/** `names` were captured in this order (each timestamp no earlier than the one before). */
function expectOrdered(t: Traced, names: readonly string[]): void {
  for (const name of names) expect(t.ns.has(name), `${t.model} ${name}`).toBe(true);
  for (let i = 1; i < names.length; i++) {
    const before = t.ns.get(names[i - 1] as string) as bigint;
    const after = t.ns.get(names[i] as string) as bigint;
    expect(after >= before, `${t.model}: ${names[i - 1]} ≤ ${names[i]}`).toBe(true);
  }
}

/** A server with `simple` (or `models`) loaded, REST and gRPC, tracing into a fresh file as `trace` says. */
async function traced(
  trace: Partial<TraceConfig>,
  models: string[] = ["simple"],
): Promise<{ s: Running; file: string }> {
  const file = traceFile();
  const s = await startServer({ http: true, controlMode: "explicit", loadModels: models, trace: { file, ...trace } });
  return { s, file };
}

const CORE: readonly string[] = CORE_TIMESTAMPS;

async function rest(s: Running, method: "GET" | "POST", path: string, body?: unknown) {
  const response = await fetch(`${s.httpUrl}${path}`, {
    method,
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const simpleJson = {
  id: "req-1",
  inputs: [
    { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: range(16) },
    { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: range(16) },
  ],
};

const DEFAULTS = {
  trace_level: ["OFF"],
  trace_rate: "1000",
  trace_count: "-1",
  log_frequency: "0",
  trace_file: "",
  trace_mode: "triton",
};

describe("trace settings (REST)", () => {
  it("reports Triton's defaults, refuses to trace without a file, and answers errors with Triton's texts", async () => {
    const s = await startServer({ http: true, controlMode: "explicit", loadModels: ["simple"] });
    expect(await rest(s, "GET", "/v2/trace/setting")).toEqual({ status: 200, json: DEFAULTS });
    expect(await rest(s, "GET", "/v2/models/simple/trace/setting")).toEqual({ status: 200, json: DEFAULTS });
    expect(await rest(s, "POST", "/v2/trace/setting", { trace_level: ["TIMESTAMPS"] })).toEqual({
      status: 400,
      json: { error: "Attempting to set invalid trace setting :trace file name is not given" },
    });
    expect(await rest(s, "POST", "/v2/trace/setting", { trace_file: null })).toEqual({
      status: 501,
      json: { error: "trace file location can not be updated through network protocol" },
    });
    expect(await rest(s, "GET", "/v2/models/nope/trace/setting")).toEqual({
      status: 400,
      json: { error: "Request for unknown model : nope" },
    });
    expect((await rest(s, "GET", "/v2/models/simple/versions/1/trace/setting")).status).toBe(404);
    const bad = async (body: unknown) => (await rest(s, "POST", "/v2/trace/setting", body)).json.error;
    expect(await bad({ trace_rate: "fast" })).toBe("Unable to parse 'trace_rate', got: fast");
    expect(await bad({ trace_rate: "10000000000" })).toBe(
      "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 10000000000",
    );
    expect(await bad({ trace_count: "-2" })).toBe("Unable to parse 'trace_count'. Expecting value >= -1, got:-2");
    expect(await bad({ trace_level: ["OFF", "TIMESTAMPS"] })).toBe("Expect only one trace level 'OFF' is specified");
    expect(await bad({ trace_rate: 5 })).toBe("attempt to access JSON non-string as string");
    // What failed changed nothing; OFF may be set with anything, and std::stoi's reading applies.
    expect(await rest(s, "POST", "/v2/trace/setting", { trace_rate: "7abc", trace_level: ["OFF"] })).toEqual({
      status: 200,
      json: { ...DEFAULTS, trace_rate: "7" },
    });
  });

  it("keeps a model's given fields, lets the others follow the global setting, and clears with null", async () => {
    const { s, file } = await traced({ level: 0 });
    const model = "/v2/models/simple/trace/setting";
    const on = await rest(s, "POST", model, { trace_level: ["TIMESTAMPS"], trace_rate: "1" });
    expect(on.json).toMatchObject({ trace_level: ["TIMESTAMPS"], trace_rate: "1", trace_file: file });
    // A global change reaches the model's unspecified fields only.
    await rest(s, "POST", "/v2/trace/setting", { trace_rate: "50", trace_count: "9", log_frequency: "4" });
    expect((await rest(s, "GET", model)).json).toMatchObject({
      trace_level: ["TIMESTAMPS"],
      trace_rate: "1",
      trace_count: "9",
      log_frequency: "4",
    });
    // Cleared, the model's rate follows the global one; clearing the global one restores the startup value.
    expect((await rest(s, "POST", model, { trace_rate: null })).json).toMatchObject({ trace_rate: "50" });
    await rest(s, "POST", "/v2/trace/setting", { trace_rate: null, trace_count: null, log_frequency: null });
    expect((await rest(s, "GET", model)).json).toMatchObject({
      trace_level: ["TIMESTAMPS"],
      trace_rate: "1000",
      trace_count: "-1",
      log_frequency: "0",
    });
    expect((await rest(s, "GET", "/v2/trace/setting")).json).toEqual({ ...DEFAULTS, trace_file: file });
  });
});

describe("trace settings (gRPC)", () => {
  it("reads, updates and clears (an empty list), with the gRPC texts", async () => {
    const file = traceFile();
    const s = await startServer({ controlMode: "explicit", loadModels: ["simple"], trace: { file } });
    const read = await s.client.traceSetting({});
    expect(Object.fromEntries(Object.entries(read.settings).map(([k, v]) => [k, v.value]))).toEqual({
      trace_level: ["OFF"],
      trace_rate: ["1000"],
      trace_count: ["-1"],
      log_frequency: ["0"],
      trace_file: [file],
      trace_mode: ["triton"],
    });
    const set = await s.client.traceSetting({
      modelName: "simple",
      settings: { trace_level: { value: ["TIMESTAMPS", "TENSORS"] }, trace_count: { value: ["3"] } },
    });
    expect(set.settings.trace_level?.value).toEqual(["TIMESTAMPS", "TENSORS"]);
    expect(set.settings.trace_count?.value).toEqual(["3"]);
    const cleared = await s.client.traceSetting({ modelName: "simple", settings: { trace_count: { value: [] } } });
    expect(cleared.settings.trace_count?.value).toEqual(["-1"]);
    await expectGrpcError(
      s.client.traceSetting({ settings: { trace_count: { value: ["-5"] } } }),
      Code.InvalidArgument,
      "Unable to parse 'trace_count'. Expecting value >= -1, got: -5",
    );
    await expectGrpcError(
      s.client.traceSetting({ settings: { trace_rate: { value: ["1", "2"] } } }),
      Code.InvalidArgument,
      "expect only 1 value for 'trace_rate'",
    );
    await expectGrpcError(
      s.client.traceSetting({ settings: { trace_file: { value: ["/tmp/x"] } } }),
      Code.Unimplemented,
      "trace file location can not be updated through network protocol",
    );
    await expectGrpcError(
      s.client.traceSetting({ modelName: "nope" }),
      Code.InvalidArgument,
      "Request for unknown model : nope",
    );
  });
});

describe("the trace file", () => {
  it("holds every REST request's timestamps in order, its model and request id, as one JSON array", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 1 });
    for (let i = 0; i < 3; i++) {
      const response = await rest(s, "POST", "/v2/models/simple/infer", simpleJson);
      expect(response.status).toBe(200);
    }
    await s.close();
    const traces = [...readTraces(file).values()];
    expect(traces).toHaveLength(3);
    for (const t of traces) {
      expect([t.model, t.version, t.requestId, t.parent]).toEqual(["simple", 1, "req-1", undefined]);
      expectOrdered(t, [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        ...CORE,
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
      ]);
    }
    expect(new Set(traces.map((t) => t.id)).size).toBe(3);
  });

  it("records the tensors at level TENSORS: the inputs as queued, the outputs as the backend made them", async () => {
    const { s, file } = await traced({ level: 0x4 | 0x8, rate: 1 });
    await rest(s, "POST", "/v2/models/simple/infer", simpleJson);
    await s.close();
    const [t] = [...readTraces(file).values()] as Traced[];
    expect(t?.tensors.get("TENSOR_QUEUE_INPUT INPUT0")).toEqual({
      name: "INPUT0",
      data: range(16).join(","),
      shape: "1,16",
      dtype: "INT32",
    });
    expect(t?.tensors.get("TENSOR_BACKEND_OUTPUT OUTPUT0")?.data).toBe(
      range(16)
        .map((i) => 2 * i)
        .join(","),
    );
    expect(t?.tensors.get("TENSOR_BACKEND_OUTPUT OUTPUT1")?.data).toBe(
      range(16)
        .map(() => 0)
        .join(","),
    );
    expect(t?.ns.has("REQUEST_START")).toBe(true);
  });

  it("traces the generate endpoints too (one response, and server-sent events)", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 1 });
    const body = { INPUT0: range(16), INPUT1: range(16), id: "g" };
    expect((await rest(s, "POST", "/v2/models/simple/generate", body)).status).toBe(200);
    const events = await fetch(`${s.httpUrl}/v2/models/simple/generate_stream`, {
      method: "POST",
      body: JSON.stringify(body),
    });
    expect((await events.text()).startsWith("data: ")).toBe(true);
    await s.close();
    const traces = [...readTraces(file).values()];
    expect(traces).toHaveLength(2);
    for (const t of traces) {
      expect([t.model, t.requestId]).toEqual(["simple", "g"]);
      expectOrdered(t, [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        ...CORE,
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
      ]);
    }
  });

  it("writes a failed request's trace too, ended by REQUEST_END", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 1 });
    const bad = { ...simpleJson, inputs: [...simpleJson.inputs, { ...simpleJson.inputs[0], name: "INPUT9" }] };
    expect((await rest(s, "POST", "/v2/models/simple/infer", bad)).status).toBe(400);
    await s.close();
    const [t] = [...readTraces(file).values()] as Traced[];
    expectOrdered(t as Traced, ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "REQUEST_END"]);
    expect(t?.ns.has("QUEUE_START")).toBe(false);
  });

  it("samples every rate-th request and stops after count; GET shows the count left", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 3, count: 2 });
    for (let i = 0; i < 9; i++) expect((await rest(s, "POST", "/v2/models/simple/infer", simpleJson)).status).toBe(200);
    expect((await rest(s, "GET", "/v2/trace/setting")).json.trace_count).toBe("0");
    await s.close();
    expect(readTraces(file).size).toBe(2);
  });

  it("writes <file>.<n> every log_frequency traces, the rest at shutdown", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 1, logFrequency: 2 });
    for (let i = 0; i < 5; i++) expect((await rest(s, "POST", "/v2/models/simple/infer", simpleJson)).status).toBe(200);
    await s.close();
    expect([0, 1, 2].map((n) => readTraces(`${file}.${n}`).size)).toEqual([2, 2, 1]);
  });

  it("traces gRPC requests with the frontend's timestamps after the core's, and ensemble steps as children", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 1 }, ["simple", "ensemble_add_sub"]);
    await s.client.modelInfer(simpleRequest(range(16), range(16), { id: "unary" }));
    await s.client.modelInfer({
      modelName: "ensemble_add_sub",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
      ],
      rawInputContents: [int32Bytes(range(16)), int32Bytes(range(16))],
    });
    await s.close();
    const traces = [...readTraces(file).values()];
    const unary = traces.find((t) => t.requestId === "unary") as Traced;
    expectOrdered(unary, [
      "GRPC_WAITREAD_START",
      "GRPC_WAITREAD_END",
      ...CORE,
      "INFER_RESPONSE_COMPLETE",
      "GRPC_SEND_START",
      "GRPC_SEND_END",
    ]);
    expect(unary.names.indexOf("GRPC_WAITREAD_START")).toBeGreaterThan(unary.names.indexOf("REQUEST_END"));
    const ensemble = traces.find((t) => t.model === "ensemble_add_sub") as Traced;
    expectOrdered(ensemble, ["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
    expect(ensemble.names.some((n) => n.startsWith("COMPUTE"))).toBe(false);
    const steps = traces.filter((t) => t.parent === ensemble.id);
    expect(steps).toHaveLength(6);
    for (const step of steps) {
      expect(step.model).toBe("simple");
      expectOrdered(step, CORE);
      expect(step.ns.get("REQUEST_START") as bigint).toBeGreaterThanOrEqual(ensemble.ns.get("QUEUE_START") as bigint);
      expect(step.ns.get("REQUEST_END") as bigint).toBeLessThanOrEqual(ensemble.ns.get("REQUEST_END") as bigint);
    }
    // galley trace-summary: the ensemble's six child requests, and the time no step covered.
    const summary = summarizeTraces(parseTraceFile(readFileSync(file, "utf8")));
    expect(summary).toMatch(/^ensemble_add_sub \(1\): 1 trace$/m);
    expect(summary).toMatch(/^ {4}simple: 6\.0 calls, [0-9.]+ us$/m);
    expect(summary).toMatch(/^ {4}in no child request \(avg\): [0-9.]+ us$/m);
    expect(summary).toMatch(/^simple \(1\), as a child: 6 traces$/m);
    expect(summary).toMatch(/^ {2}gRPC request \(avg\): [0-9.]+ us$/m);
  });

  it("traces a scripted model's BLS call as a child of the request that made it", async () => {
    const { s, file } = await traced({ level: 0x4, rate: 1 }, ["bls_sync", "add_sub"]);
    await s.client.modelInfer({
      modelName: "bls_sync",
      inputs: [
        { name: "MODEL_NAME", datatype: "BYTES", shape: [1n] },
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [bytesTensor(["add_sub"]), fp32Bytes([1, 2, 3, 4]), fp32Bytes([10, 20, 30, 40])],
    });
    await s.close();
    const traces = [...readTraces(file).values()];
    expect(traces.map((t) => t.model).sort()).toEqual(["add_sub", "bls_sync"]);
    const parent = traces.find((t) => t.model === "bls_sync") as Traced;
    const child = traces.find((t) => t.model === "add_sub") as Traced;
    expect(child.parent).toBe(parent.id);
    expectOrdered(child, CORE);
    expect(child.ns.get("REQUEST_START") as bigint).toBeGreaterThanOrEqual(parent.ns.get("COMPUTE_START") as bigint);
    expect(child.ns.get("REQUEST_END") as bigint).toBeLessThanOrEqual(parent.ns.get("COMPUTE_END") as bigint);
  });

  it("traces a Python model's BLS call when it passes trace=request.trace(), and only then (as Triton)", async () => {
    const file = traceFile();
    const repo = tempRepository();
    copyPythonModels(repo, ["add_sub", "bls_traced"]);
    const s = await startServer({
      modelRepositories: [repo],
      pythonExecutable: pythonWithNumpy(),
      trace: { file, level: 0x4, rate: 1 },
    });
    expect(s.failedModels).toEqual([]);
    await s.client.modelInfer({
      modelName: "bls_traced",
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([1, 1, 1, 1])],
    });
    await s.close();
    const traces = [...readTraces(file).values()];
    const parent = traces.find((t) => t.model === "bls_traced") as Traced;
    expect(traces.filter((t) => t.model === "add_sub").map((t) => t.parent)).toEqual([parent.id]);
  });

  it("samples nothing while the level is OFF, and starts when the API turns it on", async () => {
    const { s, file } = await traced({ rate: 1 });
    await rest(s, "POST", "/v2/models/simple/infer", simpleJson);
    await rest(s, "POST", "/v2/trace/setting", { trace_level: ["TIMESTAMPS"] });
    await rest(s, "POST", "/v2/models/simple/infer", { ...simpleJson, id: "after" });
    await s.close();
    expect([...readTraces(file).values()].map((t) => t.requestId)).toEqual(["after"]);
  });
});
