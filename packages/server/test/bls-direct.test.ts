// BLS calls a scripted model marks `direct`: after the first call, which goes through the server
// and brings the route, its worker runs the PyTorch model's batches itself (no scheduler, no main
// thread). Real worker threads, TorchScript fixtures on CPU libtorch, gRPC clients.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/base/log.js";
import { CORE_TIMESTAMPS, TRACE_TENSORS, TRACE_TIMESTAMPS } from "../src/base/trace.js";
import { parseTraceFile } from "../src/cli/trace-summary.js";
import { tensors, torchModel } from "./pytorch-support.js";
import { cleanup, type Running, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** `adder` waits out its whole 200 ms batching delay on every batch that reaches its scheduler. */
const ADDER = `max_batch_size: 8
${tensors("input", "INPUT__0:FP32:4", "INPUT__1:FP32:4")}${tensors("output", "OUTPUT__0:FP32:4", "OUTPUT__1:FP32:4")}
dynamic_batching { max_queue_delay_microseconds: 200000 }
parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }
instance_group [ { count: 1 kind: KIND_CPU } ]
`;

/**
 * `caller`: PLAN (a JSON string) says which calls to make to `adder`, one after another; RESULT
 * (JSON) has each call's OUTPUT__0 or error.
 */
const CALLER = `export default class {
  async execute(requests, context) {
    return Promise.all(requests.map(async (request) => {
      const plan = JSON.parse(request.input("PLAN").strings()[0]);
      const results = [];
      const one = async (call) => {
        const x = new Float32Array(call.x ?? [1, 2, 3, 4]);
        const y = new Float32Array([10, 20, 30, 40]);
        const controller = new AbortController();
        if (call.abort) controller.abort();
        try {
          const model = call.model ?? "adder";
          const first = { name: "INPUT__0", datatype: "FP32", shape: call.shape ?? (model === "adder" ? [1, 4] : [4]), data: x };
          const reply = await context.infer({
            model,
            inputs: model === "adder" ? [first, { name: "INPUT__1", datatype: "FP32", shape: [1, 4], data: y }] : [first],
            outputs: ["OUTPUT__0"],
            direct: call.direct,
            ...(call.priority ? { priority: call.priority } : {}),
            ...(call.abort ? { signal: controller.signal } : {}),
            ...(call.gpu ? { preferredMemory: { kind: "gpu", deviceId: 0 } } : {}),
          });
          const out = reply.output("OUTPUT__0");
          results.push({ model: reply.modelName, version: reply.modelVersion, outputs: reply.outputs.map((o) => o.name), shape: out.shape, values: Array.from(out.typed()) });
        } catch (error) {
          results.push({ error: error.message, code: error.code });
        }
      };
      // A parallel plan makes its calls in one turn (after the first, which brings the route).
      if (plan.parallel) {
        await one(plan.calls[0]);
        const rest = plan.calls.slice(1).map(() => []);
        await Promise.all(plan.calls.slice(1).map(async (call, i) => {
          const before = results.length;
          await one(call);
          rest[i] = results.splice(before, 1);
        }));
        results.push(...rest.flat());
      } else for (const call of plan.calls) await one(call);
      const text = JSON.stringify(results);
      return { outputs: [{ name: "RESULT", datatype: "BYTES", shape: [1], data: [text] }] };
    }));
  }
}
`;

function repository(): string {
  const repo = tempRepository();
  torchModel(repo, "adder", "add_sub", ADDER);
  // x * 2, or the model's own error for a negative element.
  torchModel(repo, "thrower", "throws", tensors("input", "INPUT__0:FP32:4") + tensors("output", "OUTPUT__0:FP32:4"));
  mkdirSync(join(repo, "caller", "1"), { recursive: true });
  writeFileSync(
    join(repo, "caller", "config.pbtxt"),
    `name: "caller"\nbackend: "js"\nmax_batch_size: 0\n${tensors("input", "PLAN:STRING:1")}${tensors("output", "RESULT:STRING:1")}`,
  );
  writeFileSync(join(repo, "caller", "1", "model.mjs"), CALLER);
  return repo;
}

/** A server with verbose logging: the batcher logs every batch it sends. */
async function serve(options: Parameters<typeof startServer>[0] = {}): Promise<{ s: Running; batches: () => number }> {
  const lines: string[] = [];
  const log = createLogger({ verboseLevel: 1, write: (line) => lines.push(line) });
  const s = await startServer({ modelRepositories: [repository()], log, ...options });
  return { s, batches: () => lines.filter((l) => l.includes("model 'adder': batch of size")).length };
}

interface Call {
  model?: "adder" | "thrower";
  direct?: boolean;
  x?: number[];
  shape?: number[];
  priority?: number;
  abort?: boolean;
  gpu?: boolean;
}
type Result =
  | { model: string; version: string; outputs: string[]; shape: number[]; values: number[] }
  | { error: string; code: string };

async function run(s: Running, calls: Call[], parallel = false): Promise<Result[]> {
  const plan = new TextEncoder().encode(JSON.stringify({ calls, parallel }));
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, plan.byteLength, true);
  const response = await s.client.modelInfer({
    modelName: "caller",
    inputs: [{ name: "PLAN", datatype: "BYTES", shape: [1n] }],
    rawInputContents: [new Uint8Array([...length, ...plan])],
  });
  const raw = response.rawOutputContents[0] as Uint8Array;
  return JSON.parse(new TextDecoder().decode(raw.subarray(4))) as Result[];
}

async function adderStats(s: Running, name = "adder") {
  const stats = (await s.client.modelStatistics({ name })).modelStats[0];
  return {
    inferences: Number(stats?.inferenceCount),
    executions: Number(stats?.executionCount),
    success: Number(stats?.inferenceStats?.success?.count),
    fail: Number(stats?.inferenceStats?.fail?.count),
    batches: stats?.batchStats.map((b) => [Number(b.batchSize), Number(b.computeInfer?.count)]),
  };
}

const SUM = (x: number[]) => x.map((v, i) => v + 10 * (i + 1));

describe("direct BLS calls to a PyTorch model", () => {
  it("run in the worker after the first call: right answers, no batches through the scheduler, counted in statistics", async () => {
    const { s, batches } = await serve();
    const calls = Array.from({ length: 6 }, (_, i) => ({ direct: true, x: [i, i, i, i] }));
    const results = await run(s, calls);
    expect(results).toEqual(
      calls.map((c) => ({ model: "adder", version: "1", outputs: ["OUTPUT__0"], shape: [1, 4], values: SUM(c.x) })),
    );
    // Only the first went through the batcher (and waited its 200 ms); the route came with its answer.
    expect(batches()).toBe(1);
    expect(await adderStats(s)).toEqual({ inferences: 6, executions: 6, success: 6, fail: 0, batches: [[1, 6]] });
  });

  it("runs the calls made in one turn as one batch, up to max_batch_size", async () => {
    const { s, batches } = await serve();
    const calls = Array.from({ length: 11 }, (_, i) => ({ direct: true, x: [i, i, i, i] }));
    const results = await run(s, calls, true);
    expect(results).toEqual(
      calls.map((c) => ({ model: "adder", version: "1", outputs: ["OUTPUT__0"], shape: [1, 4], values: SUM(c.x) })),
    );
    // The first alone through the batcher; the other ten in the worker as batches of 8 and 2.
    expect(batches()).toBe(1);
    expect(await adderStats(s)).toEqual({
      inferences: 11,
      executions: 3,
      success: 11,
      fail: 0,
      batches: [
        [1, 1],
        [2, 1],
        [8, 1],
      ],
    });
  });

  it("takes calls that prefer GPU memory; a model on the CPU answers with bytes", async () => {
    const { s, batches } = await serve();
    const results = await run(s, [
      { direct: true, gpu: true },
      { direct: true, gpu: true, x: [2, 2, 2, 2] },
    ]);
    expect(results.map((r) => ("values" in r ? r.values : r))).toEqual([SUM([1, 2, 3, 4]), SUM([2, 2, 2, 2])]);
    expect(batches()).toBe(1);
  });

  it("goes through the scheduler without `direct`, or with what a direct call skips (priority)", async () => {
    const { s, batches } = await serve();
    const results = await run(s, [
      { direct: true },
      { direct: false },
      { direct: true, priority: 1 },
      { direct: true },
    ]);
    expect(results.every((r) => "values" in r && r.values.join() === "11,22,33,44")).toBe(true);
    expect(batches()).toBe(3);
    expect((await adderStats(s)).success).toBe(4);
  });

  it("refuses a request that does not fit the config with the core's message, and counts it failed", async () => {
    const { s } = await serve();
    const results = await run(s, [
      { direct: false, shape: [1, 2, 2] },
      { direct: true },
      { direct: true, shape: [1, 2, 2] },
    ]);
    const usual = results[0] as { error: string; code: string };
    expect(usual.error).toMatch(/unexpected shape for input 'INPUT__0' for model 'adder'/);
    expect(results[2]).toEqual(usual);
    const stats = await adderStats(s);
    expect([stats.success, stats.fail, stats.executions]).toEqual([1, 2, 1]);
  });

  it("passes the model's own error on as the usual path does, and counts the execution and the failure", async () => {
    const { s } = await serve();
    const negative = [-1, 2, 3, 4];
    const results = await run(s, [
      { model: "thrower", direct: true },
      { model: "thrower", direct: true, x: negative },
      { model: "thrower", direct: false, x: negative },
      { model: "thrower", direct: true },
    ]);
    expect(results[0]).toMatchObject({ values: [2, 4, 6, 8], shape: [4] });
    expect(results[1]).toMatchObject({ code: "INTERNAL" });
    expect((results[1] as { error: string }).error).toMatch(/negative input is not allowed/);
    expect(results[1]).toEqual(results[2]);
    expect(results[3]).toEqual(results[0]);
    const stats = await adderStats(s, "thrower");
    expect([stats.success, stats.fail, stats.executions]).toEqual([2, 2, 4]);
  });

  it("is cancelled by its signal as the usual path is", async () => {
    const { s } = await serve();
    const results = await run(s, [{ direct: true, abort: true }, { direct: true }, { direct: true, abort: true }]);
    expect(results[0]).toMatchObject({ code: "CANCELLED" });
    expect(results[2]).toEqual(results[0]);
    expect(results[1]).toMatchObject({ values: [11, 22, 33, 44] });
  });

  it("finds the model reloaded: the old route is refused, the call goes the usual way and brings the new one", async () => {
    const { s, batches } = await serve({ controlMode: "explicit", loadModels: ["adder", "caller"] });
    expect(await run(s, [{ direct: true }, { direct: true }])).toHaveLength(2);
    expect(batches()).toBe(1);
    await s.client.repositoryModelUnload({ modelName: "adder" });
    await s.client.repositoryModelLoad({ modelName: "adder" });
    const after = await run(s, [
      { direct: true, x: [5, 5, 5, 5] },
      { direct: true, x: [6, 6, 6, 6] },
    ]);
    expect(after.map((r) => ("values" in r ? r.values : r))).toEqual([SUM([5, 5, 5, 5]), SUM([6, 6, 6, 6])]);
    expect(batches()).toBe(2);
    expect((await adderStats(s)).success).toBe(2);
    await s.client.repositoryModelUnload({ modelName: "adder" });
    const gone = await run(s, [{ direct: true }]);
    expect(gone[0]).toMatchObject({ code: "NOT_FOUND" });
  });

  it("runs a traced request's calls too, each written as a child of its trace with the worker's stamps", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-direct-trace-"));
    dirs.push(dir);
    const file = join(dir, "trace.json");
    const { s, batches } = await serve({ trace: { file, level: TRACE_TIMESTAMPS, rate: 1 } });
    const results = await run(s, [{ direct: true }, { direct: true }, { direct: true }]);
    expect(results.every((r) => "values" in r && r.values.join() === "11,22,33,44")).toBe(true);
    // The first brought the route through the scheduler; the other two ran in the worker.
    expect(batches()).toBe(1);
    await s.server.close();
    const traces = parseTraceFile(readFileSync(file, "utf8"));
    const caller = [...traces.values()].find((t) => t.model === "caller");
    const calls = [...traces.values()].filter((t) => t.model === "adder");
    expect(calls).toHaveLength(3);
    for (const call of calls) {
      expect(call.parent).toBe(caller?.id);
      const stamps = CORE_TIMESTAMPS.map((name) => call.stamps.get(name));
      expect(stamps.every((ns) => ns !== undefined)).toBe(true);
      for (let i = 1; i < stamps.length; i++)
        expect(stamps[i] as bigint).toBeGreaterThanOrEqual(stamps[i - 1] as bigint);
      // Within the caller's request.
      expect(call.stamps.get("REQUEST_START") as bigint).toBeGreaterThan(caller?.stamps.get("REQUEST_START") as bigint);
      expect(call.stamps.get("REQUEST_END") as bigint).toBeLessThan(caller?.stamps.get("REQUEST_END") as bigint);
    }
    // The direct ones waited in no queue: the first waited out the batcher's 200 ms.
    const queued = calls.map((c) =>
      Number((c.stamps.get("COMPUTE_START") ?? 0n) - (c.stamps.get("QUEUE_START") ?? 0n)),
    );
    expect(queued.filter((ns) => ns >= 150e6)).toHaveLength(1);
  });

  it("is not taken for a request traced with tensors: those are captured on the usual path", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-direct-trace-"));
    dirs.push(dir);
    const { s, batches } = await serve({
      trace: { file: join(dir, "trace.json"), level: TRACE_TIMESTAMPS | TRACE_TENSORS, rate: 1 },
    });
    await run(s, [{ direct: true }, { direct: true }, { direct: true }]);
    expect(batches()).toBe(3);
  });
});
