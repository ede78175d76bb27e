// Memory-aware serving end to end (issue 52): each version's memory measured at load and reported
// (statistics' memory_usage, metrics, log); --load-on-demand in explicit mode (HTTP, gRPC, BLS), one
// load shared by concurrent requests; --model-memory-budget with LRU eviction, pinned models,
// minimum residency on a clock the test moves, and requests in flight that eviction never fails.
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { pythonWithNumpy } from "./python-harness.js";
import {
  cleanup,
  expectGrpcError,
  grpcFailure,
  type InferenceClient,
  int32Bytes,
  pushable,
  type Running,
  readInt32,
  recordingLog,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";
import { ManualClock, markerGpu, memoryModel, openLoad, openRun } from "./support/memory-models.js";
import { sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

const MIB = 2 ** 20;
/** Three 64 MiB models hold ~200 MiB together: two fit in this budget, three do not. */
const BUDGET = 160 * MIB;

async function infer(client: InferenceClient, model: string, value: number, timeoutUs?: number): Promise<number> {
  const response = await client.modelInfer({
    modelName: model,
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
    rawInputContents: [int32Bytes([value])],
    ...(timeoutUs
      ? { parameters: { timeout: { parameterChoice: { case: "int64Param", value: BigInt(timeoutUs) } } } }
      : {}),
  });
  return readInt32(response.rawOutputContents[0])[0] as number;
}

async function httpInfer(url: string, model: string, value: number): Promise<Response> {
  return fetch(`${url}/v2/models/${model}/infer`, {
    method: "POST",
    body: JSON.stringify({ inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [value] }] }),
  });
}

async function states(client: InferenceClient): Promise<Record<string, string>> {
  const index = await client.repositoryIndex({});
  return Object.fromEntries(
    index.models.map((m) => [m.name, m.state === "" ? "-" : `${m.state}${m.reason ? `: ${m.reason}` : ""}`]),
  );
}

function onDemandServer(repo: string, extra: Parameters<typeof startServer>[0] = {}): Promise<Running> {
  return startServer({
    modelRepositories: [repo],
    controlMode: "explicit",
    loadOnDemand: true,
    metrics: true,
    ...extra,
  });
}

describe("memory accounting", () => {
  it("measures each version at load: statistics' memory_usage, galley_model_memory_bytes, one log line", async () => {
    const repo = tempRepository();
    memoryModel(repo, "big", { mib: 64, offset: 1 });
    const { log, lines } = recordingLog();
    const s = await startServer({ modelRepositories: [repo], metrics: true, http: true, log });
    expect(await infer(s.client, "big", 41)).toBe(42);
    const stats = await s.client.modelStatistics({ name: "big" });
    const usage = stats.modelStats[0]?.memoryUsage ?? [];
    expect(usage.map((u) => [u.type, u.id])).toEqual([["CPU", 0n]]);
    const bytes = Number(usage[0]?.byteSize);
    expect(bytes).toBeGreaterThanOrEqual(64 * MIB);
    expect(bytes).toBeLessThan(128 * MIB);
    // The same figure in Triton's statistics JSON and in the metrics.
    const json = (await (await fetch(`${s.httpUrl}/v2/models/big/stats`)).json()) as {
      model_stats: { memory_usage: { type: string; id: number; byte_size: number }[] }[];
    };
    expect(json.model_stats[0]?.memory_usage).toEqual([{ type: "CPU", id: 0, byte_size: bytes }]);
    const metrics = await scrape(s.metricsUrl);
    expect(sampleValue(metrics, "galley_model_memory_bytes", { model: "big", version: "1", kind: "host" })).toBe(bytes);
    expect(lines.filter((l) => /loaded 'big' version 1: \d+\.\d MiB host/.test(l))).toHaveLength(1);
  });

  it("counts a Python model's stub process: its resident set is the model's", async () => {
    const repo = tempRepository();
    mkdirSync(join(repo, "py", "1"), { recursive: true });
    writeFileSync(
      join(repo, "py", "config.pbtxt"),
      `name: "py"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
    );
    writeFileSync(
      join(repo, "py", "1", "model.py"),
      `import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones(96 * 1024 * 1024, dtype=np.uint8)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + int(self.weights[0]))]) for r in requests]
`,
    );
    const s = await startServer({ modelRepositories: [repo], pythonExecutable: pythonWithNumpy() });
    expect(await infer(s.client, "py", 1)).toBe(2);
    const bytes = Number((await s.client.modelStatistics({ name: "py" })).modelStats[0]?.memoryUsage[0]?.byteSize);
    // The stub's 96 MiB of weights, its interpreter and numpy: far more than this process grew by.
    expect(bytes).toBeGreaterThan(96 * MIB);
  });
});

describe("explicit mode without --load-on-demand", () => {
  it("is Triton's: a model not loaded is unknown to inference, and nothing loads", async () => {
    const repo = tempRepository();
    memoryModel(repo, "a", { mib: 1, offset: 1 });
    const s = await startServer({ modelRepositories: [repo], controlMode: "explicit", metrics: true });
    await expectGrpcError(infer(s.client, "a", 1), Code.NotFound, "Request for unknown model: 'a' is not found");
    expect(await states(s.client)).toEqual({ a: "-" });
    const metrics = await scrape(s.metricsUrl);
    expect(metrics.types.has("galley_model_loads_on_demand_total")).toBe(false);
  });
});

describe("--load-on-demand", () => {
  it("loads a repository model for the first gRPC and HTTP request and answers it", async () => {
    const repo = tempRepository();
    memoryModel(repo, "a", { mib: 1, offset: 10 });
    memoryModel(repo, "b", { mib: 1, offset: 20 });
    const s = await onDemandServer(repo, { http: true });
    expect(await states(s.client)).toEqual({ a: "-", b: "-" });
    expect(await infer(s.client, "a", 1)).toBe(11);
    const reply = await httpInfer(s.httpUrl as string, "b", 2);
    expect(reply.status).toBe(200);
    expect(((await reply.json()) as { outputs: { data: number[] }[] }).outputs[0]?.data).toEqual([22]);
    expect(await states(s.client)).toEqual({ a: "READY", b: "READY" });
    const metrics = await scrape(s.metricsUrl);
    expect(sampleValue(metrics, "galley_model_loads_on_demand_total", { model: "a" })).toBe(1);
    expect(sampleValue(metrics, "galley_model_loads_on_demand_total", { model: "b" })).toBe(1);
    // Loaded now: more requests load nothing.
    expect(await infer(s.client, "a", 5)).toBe(15);
    expect(sampleValue(await scrape(s.metricsUrl), "galley_model_loads_on_demand_total", { model: "a" })).toBe(1);
  });

  it("concurrent first requests (gRPC and HTTP) share one load", async () => {
    const repo = tempRepository();
    memoryModel(repo, "slow", { mib: 1, offset: 100, gatedLoad: true });
    const { log, lines } = recordingLog();
    const s = await onDemandServer(repo, { http: true, log });
    const grpc = Array.from({ length: 6 }, (_, i) => infer(s.client, "slow", i));
    const http = Array.from({ length: 4 }, (_, i) => httpInfer(s.httpUrl as string, "slow", 10 + i));
    // Every request is waiting for the one load before it is let go.
    await waitFor(
      async () => {
        const m = await scrape(s.metricsUrl);
        return m.types.has("galley_model_load_waiting_requests") &&
          sampleValue(m, "galley_model_load_waiting_requests", { model: "slow" }) === 10
          ? true
          : undefined;
      },
      { what: "10 requests waiting for the load" },
    );
    await waitFor(async () => (await states(s.client)).slow === "LOADING", { what: "slow LOADING" });
    openLoad(repo, "slow");
    expect(await Promise.all(grpc)).toEqual([100, 101, 102, 103, 104, 105]);
    const answers = await Promise.all(
      http.map(async (r) => ((await (await r).json()) as { outputs: { data: number[] }[] }).outputs[0]?.data[0]),
    );
    expect(answers).toEqual([110, 111, 112, 113]);
    expect(sampleValue(await scrape(s.metricsUrl), "galley_model_loads_on_demand_total", { model: "slow" })).toBe(1);
    expect(lines.filter((l) => l.includes("loading 'slow' on demand"))).toHaveLength(1);
    expect(lines.filter((l) => l.includes("successfully loaded 'slow'"))).toHaveLength(1);
  });

  it("a ModelStreamInfer request loads its model; default-mode answers keep the requests' order", async () => {
    const repo = tempRepository();
    memoryModel(repo, "slow", { mib: 1, offset: 100, gatedLoad: true });
    memoryModel(repo, "ready", { mib: 1, offset: 200 });
    const s = await onDemandServer(repo);
    expect(await infer(s.client, "ready", 0)).toBe(200);
    const requests = pushable<Parameters<InferenceClient["modelInfer"]>[0]>();
    const stream = s.client.modelStreamInfer(requests);
    const request = (model: string, value: number) => ({
      modelName: model,
      inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
      rawInputContents: [int32Bytes([value])],
    });
    requests.push(request("slow", 1));
    requests.push(request("ready", 2));
    await waitFor(() => s.server.core.memoryCounters().waiting.get("slow") === 1, {
      what: "the stream's request waiting",
    });
    openLoad(repo, "slow");
    const answers: number[] = [];
    for await (const message of stream) {
      expect(message.errorMessage).toBe("");
      answers.push(readInt32(message.inferResponse?.rawOutputContents[0])[0] as number);
      if (answers.length === 2) requests.end();
    }
    expect(answers).toEqual([101, 202]);
  });

  it("a BLS call from a JS model loads the model it calls", async () => {
    const repo = tempRepository();
    memoryModel(repo, "a", { mib: 1, offset: 7 });
    memoryModel(repo, "caller", { mib: 1, offset: 0 });
    // caller: OUT = a(IN) through BLS.
    writeFileSync(
      join(repo, "caller", "1", "model.mjs"),
      `export default class {
  async execute(requests, context) {
    return Promise.all(requests.map(async (r) => {
      const reply = await context.infer({ model: "a", inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: r.input("IN").typed() }], outputs: ["OUT"] });
      return { outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: reply.output("OUT").typed() }] };
    }));
  }
}
`,
    );
    const s = await onDemandServer(repo);
    expect(await infer(s.client, "caller", 5)).toBe(12);
    expect(await states(s.client)).toEqual({ a: "READY", caller: "READY" });
  });

  it("an ensemble's step loads its composing model when it is not loaded", async () => {
    const repo = tempRepository();
    memoryModel(repo, "a", { mib: 1, offset: 5 });
    mkdirSync(join(repo, "ens", "1"), { recursive: true });
    writeFileSync(
      join(repo, "ens", "config.pbtxt"),
      `name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step { model_name: "a" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } } }
`,
    );
    const s = await onDemandServer(repo);
    const run = async (value: number) => {
      const response = await s.client.modelInfer({
        modelName: "ens",
        inputs: [{ name: "X", datatype: "INT32", shape: [1n] }],
        rawInputContents: [int32Bytes([value])],
      });
      return readInt32(response.rawOutputContents[0])[0];
    };
    // The ensemble's load loads a (as Triton's does); unloading a leaves the ensemble READY.
    expect(await run(1)).toBe(6);
    await s.client.repositoryModelUnload({ modelName: "a" });
    expect(await states(s.client)).toEqual({ a: "UNAVAILABLE: unloaded", ens: "READY" });
    // The step finds a unloaded and loads it on demand.
    expect(await run(2)).toBe(7);
    expect((await states(s.client)).a).toBe("READY");
    expect(s.server.core.memoryCounters().onDemandLoads).toEqual(
      new Map([
        ["ens", 1],
        ["a", 1],
      ]),
    );
  });

  it("names that are no repository model folder get Triton's unknown-model error and load nothing", async () => {
    const repo = tempRepository();
    memoryModel(repo, "a", { mib: 1, offset: 1 });
    const s = await onDemandServer(repo, { http: true });
    for (const name of ["nope", "../a", "a/..", "..", ".", "a/1", `${repo}/a`, "%2e%2e"]) {
      await expectGrpcError(
        infer(s.client, name, 1),
        Code.NotFound,
        `Request for unknown model: '${name}' is not found`,
      );
    }
    const reply = await httpInfer(s.httpUrl as string, "nope", 1);
    expect(reply.status).toBe(404);
    expect(await reply.json()).toEqual({ error: "Request for unknown model: 'nope' is not found" });
    expect(await states(s.client)).toEqual({ a: "-" });
    expect((await scrape(s.metricsUrl)).types.has("galley_model_loads_on_demand_total")).toBe(false);
  });

  it("a load that fails answers UNAVAILABLE with why; the next request tries again", async () => {
    const repo = tempRepository();
    memoryModel(repo, "broken", { mib: 1, offset: 1, failing: true });
    const s = await onDemandServer(repo, { http: true });
    const failure = await grpcFailure(infer(s.client, "broken", 1));
    expect(failure.code).toBe(Code.Unavailable);
    expect(failure.rawMessage).toMatch(
      /^Request for unknown model: 'broken' has no available versions: loading it on demand failed: .*this model does not load/,
    );
    const reply = await httpInfer(s.httpUrl as string, "broken", 1);
    expect(reply.status).toBe(503);
    expect(sampleValue(await scrape(s.metricsUrl), "galley_model_loads_on_demand_total", { model: "broken" })).toBe(2);
  });

  it("a request waits at most its timeout; the load goes on and serves the next request", async () => {
    const repo = tempRepository();
    memoryModel(repo, "slow", { mib: 1, offset: 3, gatedLoad: true });
    const clock = new ManualClock();
    const s = await onDemandServer(repo, { clock });
    const first = grpcFailure(infer(s.client, "slow", 1, 5_000_000));
    await waitFor(() => clock.pending === 1, { what: "the request's wait timer" });
    clock.advance(5);
    const failure = await first;
    expect(failure.code).toBe(Code.Unavailable);
    expect(failure.rawMessage).toBe(
      "Request for unknown model: 'slow' has no available versions: still loading on demand after 5000 ms",
    );
    await waitFor(async () => (await states(s.client)).slow === "LOADING", { what: "slow LOADING" });
    openLoad(repo, "slow");
    await waitFor(async () => (await states(s.client)).slow === "READY", { what: "slow READY" });
    expect(await infer(s.client, "slow", 1)).toBe(4);
  });
});

describe("--model-memory-budget", () => {
  it("serves three models that together exceed the budget in turn, evicting the least recently used", async () => {
    const repo = tempRepository();
    for (const [i, name] of ["a", "b", "c"].entries()) memoryModel(repo, name, { mib: 64, offset: 100 * (i + 1) });
    const s = await onDemandServer(repo, { modelMemoryBudget: { host: BUDGET }, modelMinResidencySecs: 0 });
    for (let round = 0; round < 2; round++) {
      expect(await infer(s.client, "a", round)).toBe(100 + round);
      expect(await infer(s.client, "b", round)).toBe(200 + round);
      expect(await infer(s.client, "c", round)).toBe(300 + round);
    }
    const metrics = await scrape(s.metricsUrl);
    // Each load past the second evicted the least recently used model: a, b, c, a in turn.
    expect(["a", "b", "c"].map((model) => sampleValue(metrics, "galley_model_evictions_total", { model }))).toEqual([
      2, 1, 1,
    ]);
    expect(sampleValue(metrics, "galley_model_memory_budget_bytes", { kind: "host" })).toBe(BUDGET);
    const held = s.server.core.readyModels().reduce((sum, m) => sum + (m.memory[0]?.byteSize ?? 0), 0);
    expect(held).toBeLessThanOrEqual(BUDGET);
    expect(await states(s.client)).toEqual({
      a: "UNAVAILABLE: evicted to fit the memory budget",
      b: "READY",
      c: "READY",
    });
    // An evicted model does not make the server unready.
    expect(s.server.core.isReady()).toBe(true);
  });

  it("gpu0: the GPU figures (a test GPU here; NVML on a GPU) are the models' memory, and the same rule evicts under them", async () => {
    const repo = tempRepository();
    const gpu = tempRepository();
    for (const [i, name] of ["a", "b", "c"].entries()) {
      memoryModel(repo, name, { mib: 1, offset: 100 * (i + 1), gpuMarker: gpu });
    }
    const { log, lines } = recordingLog();
    const s = await onDemandServer(repo, {
      // GPU 3 is not in the figures: a warning at start, and nothing held there.
      modelMemoryBudget: {
        gpus: new Map([
          [0, BUDGET],
          [3, BUDGET],
        ]),
      },
      modelMinResidencySecs: 0,
      deviceMemory: markerGpu(gpu, 64 * MIB),
      log,
    });
    for (let round = 0; round < 2; round++) {
      expect(await infer(s.client, "a", round)).toBe(100 + round);
      expect(await infer(s.client, "b", round)).toBe(200 + round);
      expect(await infer(s.client, "c", round)).toBe(300 + round);
    }
    const metrics = await scrape(s.metricsUrl);
    expect(["a", "b", "c"].map((model) => sampleValue(metrics, "galley_model_evictions_total", { model }))).toEqual([
      2, 1, 1,
    ]);
    expect(sampleValue(metrics, "galley_model_memory_budget_bytes", { kind: "gpu", device: "0" })).toBe(BUDGET);
    expect(
      sampleValue(metrics, "galley_model_memory_bytes", { model: "c", version: "1", kind: "gpu", device: "0" }),
    ).toBe(64 * MIB);
    const usage = (await s.client.modelStatistics({ name: "c" })).modelStats[0]?.memoryUsage ?? [];
    expect(usage.filter((u) => u.type === "GPU").map((u) => [u.id, Number(u.byteSize)])).toEqual([[0n, 64 * MIB]]);
    expect(await states(s.client)).toEqual({
      a: "UNAVAILABLE: evicted to fit the memory budget",
      b: "READY",
      c: "READY",
    });
    expect(lines.some((l) => /loaded 'c' version 1: \d+\.\d MiB host, 64\.0 MiB gpu0/.test(l))).toBe(true);
    expect(lines.some((l) => l.includes("to fit --model-memory-budget gpu0:160.0 MiB"))).toBe(true);
    expect(
      lines.filter((l) => l.includes("--model-memory-budget gpu3: no GPU 3 in NVML's figures (GPUs 0)")),
    ).toHaveLength(1);
  });

  it("explicit load requests take their turn under the budget; a model loaded with overrides is never evicted", async () => {
    const repo = tempRepository();
    for (const [i, name] of ["a", "b", "c", "d"].entries()) memoryModel(repo, name, { mib: 64, offset: 10 * i });
    const s = await onDemandServer(repo, {
      modelMemoryBudget: { host: BUDGET },
      modelMinResidencySecs: 0,
      loadModels: ["a"],
    });
    // a was loaded at startup (--load-model), b with a config override: both explicit.
    const config = JSON.stringify({
      name: "b",
      backend: "js",
      max_batch_size: 0,
      input: [{ name: "IN", data_type: "TYPE_INT32", dims: [1] }],
      output: [{ name: "OUT", data_type: "TYPE_INT32", dims: [1] }],
    });
    await s.client.repositoryModelLoad({
      modelName: "b",
      parameters: { config: { parameterChoice: { case: "stringParam", value: config } } },
    });
    // A load request for c needs room: a (a plain explicit load) goes, b (overridden) stays.
    await s.client.repositoryModelLoad({ modelName: "c" });
    expect(await states(s.client)).toMatchObject({
      a: "UNAVAILABLE: evicted to fit the memory budget",
      b: "READY",
      c: "READY",
    });
    // a comes back on demand, which evicts c, the only evictable one.
    expect(await infer(s.client, "a", 1)).toBe(1);
    expect(await states(s.client)).toMatchObject({
      a: "READY",
      b: "READY",
      c: "UNAVAILABLE: evicted to fit the memory budget",
    });
    // An unload request takes a model out of the budget: d then loads without evicting anything.
    await s.client.repositoryModelUnload({ modelName: "a" });
    expect(await infer(s.client, "d", 1)).toBe(31);
    expect(s.server.core.memoryCounters().evictions).toEqual(
      new Map([
        ["a", 1],
        ["c", 1],
      ]),
    );
    expect((await states(s.client)).a).toBe("UNAVAILABLE: unloaded");
  });

  it("never evicts a pinned model", async () => {
    const repo = tempRepository();
    memoryModel(repo, "pinned", { mib: 64, offset: 1, pinned: true });
    memoryModel(repo, "b", { mib: 64, offset: 2 });
    memoryModel(repo, "c", { mib: 64, offset: 3 });
    const s = await onDemandServer(repo, { modelMemoryBudget: { host: BUDGET }, modelMinResidencySecs: 0 });
    for (let round = 0; round < 3; round++) {
      for (const [name, offset] of [
        ["pinned", 1],
        ["b", 2],
        ["c", 3],
      ] as const) {
        expect(await infer(s.client, name, 10)).toBe(10 + offset);
      }
    }
    const counters = s.server.core.memoryCounters().evictions;
    expect(counters.get("pinned")).toBeUndefined();
    expect((counters.get("b") ?? 0) + (counters.get("c") ?? 0)).toBeGreaterThanOrEqual(4);
    expect((await states(s.client)).pinned).toBe("READY");
  });

  it("evicts nothing within --model-min-residency of its load (clock moved by the test)", async () => {
    const repo = tempRepository();
    for (const [i, name] of ["a", "b", "c", "d"].entries()) memoryModel(repo, name, { mib: 64, offset: i });
    const clock = new ManualClock();
    const { log, lines } = recordingLog();
    const s = await onDemandServer(repo, {
      modelMemoryBudget: { host: BUDGET },
      modelMinResidencySecs: 30,
      clock,
      log,
    });
    expect(await infer(s.client, "a", 0)).toBe(0);
    clock.advance(1);
    expect(await infer(s.client, "b", 0)).toBe(1);
    clock.advance(1);
    // a and b are both younger than 30 s: c loads (its size unknown until then) and leaves the models over the budget.
    expect(await infer(s.client, "c", 0)).toBe(2);
    expect(s.server.core.memoryCounters().evictions.size).toBe(0);
    expect(
      lines.some((l) => l.includes("over --model-memory-budget host:160.0 MiB, and none can be evicted now")),
    ).toBe(true);
    clock.advance(29);
    // a is 31 s old and the least recently used: it goes first.
    expect(await infer(s.client, "d", 0)).toBe(3);
    expect(s.server.core.memoryCounters().evictions.get("a")).toBe(1);
    expect((await states(s.client)).a).toBe("UNAVAILABLE: evicted to fit the memory budget");
    // Every model is now younger than 30 s but a's size is known: a load that cannot be made to fit is refused.
    clock.advance(0);
    const failure = await grpcFailure(infer(s.client, "a", 0));
    expect(failure.code).toBe(Code.Unavailable);
    expect(failure.rawMessage).toMatch(
      /loading it on demand failed: .*not enough room in --model-memory-budget host:160\.0 MiB for 'a': it needs/,
    );
    expect((await states(s.client)).a).toMatch(/^UNAVAILABLE: not enough room in --model-memory-budget/);
    expect(s.server.core.isReady()).toBe(true);
    // Past the residency the same request succeeds.
    clock.advance(31);
    expect(await infer(s.client, "a", 0)).toBe(0);
  });

  it("never evicts a model with a request in flight: the request completes and another model goes", async () => {
    const repo = tempRepository();
    memoryModel(repo, "busy", { mib: 64, offset: 1, gatedRun: true });
    memoryModel(repo, "idle", { mib: 64, offset: 2 });
    memoryModel(repo, "new", { mib: 64, offset: 3 });
    const s = await onDemandServer(repo, { modelMemoryBudget: { host: BUDGET }, modelMinResidencySecs: 0 });
    // busy loads first (least recently used from then on) and starts a request that waits in execute.
    const inFlight = infer(s.client, "busy", 40);
    await waitFor(
      () => {
        try {
          rmSync(join(repo, "busy.running"));
          return true;
        } catch {
          return false;
        }
      },
      { what: "busy's execute to start" },
    );
    expect(await infer(s.client, "idle", 0)).toBe(2);
    // Loading new needs room: busy is older, but busy; idle goes.
    expect(await infer(s.client, "new", 0)).toBe(3);
    expect(s.server.core.memoryCounters().evictions.get("busy")).toBeUndefined();
    expect(s.server.core.memoryCounters().evictions.get("idle")).toBe(1);
    openRun(repo, "busy");
    expect(await inFlight).toBe(41);
    expect((await states(s.client)).busy).toBe("READY");
  });
});
