// Faults in models, and what they may and may not do to the server: a scripted model that throws,
// exits, hangs, leaks memory, answers with bad outputs or cannot stay up fails its own requests
// only, backs off, and is reported not ready while down; other models keep answering. The core is
// built here (not through createServer) so that the js backend's defaults can be made short.
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createJsBackend, type JsBackendOptions } from "../src/backend/js/js-backend.js";
import { createOnnxRuntimeBackend } from "../src/backend/onnxruntime/onnxruntime-backend.js";
import { BackendRegistry } from "../src/backend/registry.js";
import type { InferenceRequest } from "../src/base/inference-request.js";
import { InferenceServer } from "../src/core/inference-server.js";
import { ModelManager } from "../src/repository/model-manager.js";
import { cleanup, int32Bytes, readInt32, recordingLog, tempRepository, waitFor } from "./support/harness.js";

const managers = new Set<ModelManager>();

afterEach(async () => {
  await Promise.all([...managers].map((m) => m.stop()));
  managers.clear();
  await cleanup();
});

/** A core over `repo` with the js and ONNX Runtime backends, loading `models` (explicit mode). */
async function startCore(repo: string, models: string[], js: Partial<JsBackendOptions> = {}) {
  const { log, lines: raw } = recordingLog();
  /** The log so far, one line each, without its newline. */
  const lines = () => raw.map((l) => l.trimEnd());
  let core: InferenceServer | undefined;
  const backends = new BackendRegistry([
    createJsBackend({ log, inference: () => core as InferenceServer, ...js }),
    createOnnxRuntimeBackend({ log }),
  ]);
  const manager = new ModelManager({
    repositories: [repo],
    backends,
    log,
    controlMode: "explicit",
    startupModels: models,
    infer: (request) => (core as InferenceServer).infer(request),
  });
  managers.add(manager);
  core = new InferenceServer({ models: manager, log, strictReadiness: true });
  const failed = await manager.start();
  return { core, lines, failed };
}

/** Write a scripted model: `config` follows name and backend, `source` is model.mjs. */
function jsModel(repo: string, name: string, config: string, source: string): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "config.pbtxt"), `name: "${name}"\nbackend: "js"\n${config}\n`);
  writeFileSync(join(repo, name, "1", "model.mjs"), source);
}

const INT32_IO = `max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`;

/** OUT = IN + 1. */
const STEADY = `export default class {
  execute(requests) {
    return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(r.input("IN").typed()[0] + 1) }] }));
  }
}`;

function int32Request(model: string, value: number, shape = [1]): InferenceRequest {
  return {
    modelName: model,
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [{ name: "IN", datatype: "INT32", shape, data: int32Bytes([value]), parameters: {} }],
    outputs: [],
  };
}

function simpleRequest(): InferenceRequest {
  const input = (name: string) => ({
    name,
    datatype: "INT32" as const,
    shape: [1, 16],
    data: int32Bytes(Array(16).fill(1)),
    parameters: {},
  });
  return {
    modelName: "simple",
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [input("INPUT0"), input("INPUT1")],
    outputs: [],
  };
}

async function out(core: InferenceServer, request: InferenceRequest): Promise<number[]> {
  const response = await core.infer(request);
  return readInt32(response.outputs[0]?.data);
}

/** The request's failure (code and message); fails the test when it succeeds. */
async function failure(call: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await call;
  } catch (error) {
    return { code: (error as { code: string }).code, message: (error as Error).message };
  }
  throw new Error("the request succeeded");
}

/** A repository with `simple` (ONNX Runtime) and `steady` (scripted), the neighbours that must not notice. */
function repository(): string {
  const repo = tempRepository(["simple"]);
  jsModel(repo, "steady", INT32_IO, STEADY);
  return repo;
}

async function neighboursAnswer(core: InferenceServer): Promise<void> {
  expect(await out(core, int32Request("steady", 1))).toEqual([2]);
  expect(await out(core, simpleRequest())).toEqual(Array(16).fill(2));
}

describe("a scripted model's faults stay with that model", () => {
  it("an execute that throws fails its requests with the model's message and code; the instance goes on", async () => {
    const repo = repository();
    jsModel(
      repo,
      "thrower",
      INT32_IO,
      `export default class { execute(requests) {
         if (requests[0].input("IN").typed()[0] < 0) throw Object.assign(new Error("negative input"), { code: "INVALID_ARG" });
         return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(7) }] }));
       } }`,
    );
    const { core } = await startCore(repo, ["simple", "steady", "thrower"]);
    expect(await failure(core.infer(int32Request("thrower", -1)))).toEqual({
      code: "INVALID_ARG",
      message: "negative input",
    });
    await neighboursAnswer(core);
    expect(await out(core, int32Request("thrower", 1))).toEqual([7]);
    expect(core.isReady()).toBe(true);
  });

  it("process.exit in execute fails that request; the worker restarts and the model is ready again", async () => {
    const repo = repository();
    jsModel(
      repo,
      "exiter",
      INT32_IO,
      `export default class { execute(requests) {
         if (requests[0].input("IN").typed()[0] < 0) process.exit(4);
         return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(5) }] }));
       } }`,
    );
    const { core } = await startCore(repo, ["simple", "steady", "exiter"]);
    expect(await failure(core.infer(int32Request("exiter", -1)))).toEqual({
      code: "INTERNAL",
      message: "model instance 'exiter_0' exited with code 4; the instance is restarting",
    });
    // Until the new worker has run initialize, the model and (strict readiness) the server are not ready.
    expect(await core.modelReady("exiter", "")).toBe(false);
    expect(core.isReady()).toBe(false);
    await neighboursAnswer(core);
    await waitFor(() => core.modelReady("exiter", ""), { what: "exiter ready again" });
    expect(core.isReady()).toBe(true);
    expect(await out(core, int32Request("exiter", 1))).toEqual([5]);
  });

  it("an execute that never returns is stopped by the default execute timeout (no parameter set)", async () => {
    const repo = repository();
    jsModel(
      repo,
      "spinner",
      INT32_IO,
      `export default class { execute(requests) {
         if (requests[0].input("IN").typed()[0] < 0) for (;;) {}
         return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(9) }] }));
       } }`,
    );
    // Stands for DEFAULT_EXECUTE_TIMEOUT_MS, which a test cannot wait for.
    const { core } = await startCore(repo, ["simple", "steady", "spinner"], { executeTimeoutMs: 300 });
    const stuck = failure(core.infer(int32Request("spinner", -1)));
    await neighboursAnswer(core);
    expect(await stuck).toEqual({
      code: "INTERNAL",
      message:
        "model instance 'spinner_0' did not finish execute within 300 ms (execute_timeout_ms); the instance is restarting",
    });
    expect(await out(core, int32Request("spinner", 1))).toEqual([9]);
  });

  it("execute_timeout_ms 0 turns the default off", async () => {
    const repo = tempRepository();
    jsModel(
      repo,
      "patient",
      `${INT32_IO}\nparameters { key: "execute_timeout_ms" value: { string_value: "0" } }`,
      `export default class { async execute(requests) {
         await new Promise((resolve) => setTimeout(resolve, 400));
         return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(3) }] }));
       } }`,
    );
    const { core } = await startCore(repo, ["patient"], { executeTimeoutMs: 100 });
    expect(await out(core, int32Request("patient", 1))).toEqual([3]);
  });

  it("ArrayBuffers held past memory_limit_mb fail the request and restart the instance; garbage does not count", async () => {
    const repo = repository();
    jsModel(
      repo,
      "leaky",
      `${INT32_IO}\nparameters { key: "memory_limit_mb" value: { string_value: "64" } }`,
      `const held = [];
       export default class { execute(requests) {
         const n = requests[0].input("IN").typed()[0];
         // 256 MiB either kept (a leak) or dropped at once (garbage).
         for (let i = 0; i < 4; i++) { const buffer = new ArrayBuffer(64 * 1024 * 1024); new Uint8Array(buffer).fill(1); if (n < 0) held.push(buffer); }
         return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(held.length) }] }));
       } }`,
    );
    const { core } = await startCore(repo, ["simple", "steady", "leaky"]);
    expect(await out(core, int32Request("leaky", 1))).toEqual([0]);
    const leaked = await failure(core.infer(int32Request("leaky", -1)));
    expect(leaked.code).toBe("INTERNAL");
    expect(leaked.message).toMatch(
      /^model instance 'leaky_0' ran out of memory \(memory_limit_mb 64: 2\d\d MiB of heap and ArrayBuffers in use\); the instance is restarting$/,
    );
    await neighboursAnswer(core);
    // A fresh worker: the leaked buffers went with the old one.
    expect(await out(core, int32Request("leaky", 1))).toEqual([0]);
  });
});

describe("outputs are checked by name, and as tensors in themselves (Triton's AddOutput)", () => {
  // IN picks the fault; with max_batch_size 2 and preferred batch 2, two requests run as one batch.
  const FAULTY = `export default class { execute(requests) {
    return requests.map((r) => {
      const n = r.input("IN").typed()[0];
      const good = { name: "OUT", datatype: "INT32", shape: [1, 1], data: Int32Array.of(requests.length * 100 + n) };
      switch (n) {
        case 1: return { outputs: [{ ...good, datatype: "FP32", data: Float32Array.of(1.5) }] };
        case 2: return { outputs: [] };
        case 3: return { outputs: [{ ...good, name: "NOPE" }] };
        case 4: return 42;
        case 5: return { outputs: [{ ...good, shape: [1, 2], data: Int32Array.of(1, 2) }] };
        case 6: return { outputs: [{ ...good, shape: [2, 1], data: Int32Array.of(1, 2) }] };
        case 7: return { outputs: [{ ...good, shape: [1] }] };
        case 8: return { outputs: [{ ...good, data: [1] }] };
        case 9: return { outputs: [{ ...good, datatype: "INT64", data: BigInt64Array.of(1n << 40n) }] };
        case 10: return { outputs: [{ ...good, shape: [1, 2] }] };
        default: return { outputs: [good] };
      }
    });
  } }`;
  const CONFIG = `max_batch_size: 2
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 5000000 }`;

  it.each([
    [1, "FP32", [1, 1], [0x3fc00000]],
    [2, undefined, undefined, undefined],
    [5, "INT32", [1, 2], [1, 2]],
    [6, "INT32", [2, 1], [1, 2]],
    [7, "INT32", [1], [207]],
    [9, "INT64", [1, 1], [0, 256]],
  ])(
    "fault %i: the output comes back as the model made it (%s %j), as Triton returns it",
    async (n, datatype, shape, words) => {
      const repo = repository();
      jsModel(repo, "faulty", CONFIG, FAULTY);
      const { core } = await startCore(repo, ["simple", "steady", "faulty"]);
      const [made, good] = await Promise.all([
        core.infer(int32Request("faulty", n, [1, 1])),
        core.infer(int32Request("faulty", 20, [1, 1])),
      ]);
      const output = made.outputs[0];
      expect(output && [output.datatype, output.shape, readInt32(output.data)]).toEqual(
        datatype === undefined ? undefined : [datatype, shape, words],
      );
      expect(readInt32(good.outputs[0]?.data)).toEqual([220]);
    },
  );

  it.each([
    [3, "INVALID_ARG", "unexpected inference output 'NOPE' for model 'faulty'"],
    [
      4,
      "INTERNAL",
      "Failed to process the request(s) for model instance 'faulty_0', message: Expected a 'Response' object in the execute function return list, found type 'number'.",
    ],
    // Raised inside the worker, from the error table's entries (JS_OUTPUT_LIST, JS_OUTPUT_BYTE_SIZE).
    [8, "INVALID_ARG", "output 'OUT' is INT32: give a typed array, not a list"],
    [10, "INVALID_ARG", "output 'OUT' has 4 bytes, its shape [1,2] of INT32 needs 8"],
  ])("fault %i fails its own request (%s: %s) and not its batch neighbour", async (n, code, message) => {
    const repo = repository();
    jsModel(repo, "faulty", CONFIG, FAULTY);
    const { core } = await startCore(repo, ["simple", "steady", "faulty"]);
    const [bad, good] = await Promise.allSettled([
      core.infer(int32Request("faulty", n, [1, 1])),
      core.infer(int32Request("faulty", 20, [1, 1])),
    ]);
    expect(bad.status).toBe("rejected");
    expect({
      code: ((bad as PromiseRejectedResult).reason as { code: string }).code,
      message: ((bad as PromiseRejectedResult).reason as Error).message,
    }).toEqual({ code, message });
    // 220: the neighbour ran in the same batch of two.
    expect(good.status === "fulfilled" && readInt32(good.value.outputs[0]?.data)).toEqual([220]);
    await neighboursAnswer(core);
  });

  it("a decoupled model's bad response ends that request with the error", async () => {
    const repo = tempRepository();
    jsModel(
      repo,
      "streamer",
      `${INT32_IO}\nmodel_transaction_policy { decoupled: true }`,
      `export default class { execute(requests) {
         for (const r of requests) {
           const sender = r.responseSender();
           sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(1) }] });
           sender.send({ outputs: [{ name: "NOPE", datatype: "INT32", shape: [1], data: Int32Array.of(2) }] }, { final: true });
         }
       } }`,
    );
    const { core } = await startCore(repo, ["streamer"]);
    const seen: (number[] | string)[] = [];
    try {
      for await (const item of core.stream(int32Request("streamer", 0))) {
        if (item.response) seen.push(readInt32(item.response.outputs[0]?.data));
      }
    } catch (error) {
      seen.push((error as Error).message);
    }
    expect(seen).toEqual([[1], "unexpected inference output 'NOPE' for model 'streamer'"]);
  });
});

describe("an instance that cannot stay up", () => {
  it("backs off exponentially, is not ready and refuses requests at once while down, and recovers", async () => {
    const repo = repository();
    const flag = join(repo, "broken.flag");
    jsModel(
      repo,
      "looping",
      INT32_IO,
      `import { existsSync } from "node:fs";
       export default class {
         initialize() { if (existsSync(${JSON.stringify(flag)})) throw new Error("cannot start"); }
         execute(requests) {
           if (requests[0].input("IN").typed()[0] < 0) process.exit(1);
           return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(11) }] }));
         }
       }`,
    );
    const { core, lines } = await startCore(repo, ["simple", "steady", "looping"]);
    expect(core.isReady()).toBe(true);
    writeFileSync(flag, "");
    await failure(core.infer(int32Request("looping", -1)));
    const restarts = () =>
      lines().filter((l) => l.includes("model instance 'looping_0'") && l.includes("restarting it"));
    await waitFor(() => restarts().some((l) => l.endsWith("restarting it in 800 ms")), { what: "the 800 ms back-off" });
    // One immediate restart after the crash, then each failed start waits twice as long.
    const seen = restarts();
    expect(seen.map((l) => / in (\d+) ms$/.exec(l)?.[1] ?? "0")).toEqual(["0", "100", "200", "400", "800"]);
    // Each announced wait really passed before the next attempt (log times are to the millisecond).
    const times = seen.map((l) => {
      const [, h, m, s] = /(\d\d):(\d\d):(\d\d\.\d{3})/.exec(l) ?? [];
      return (Number(h) * 60 + Number(m)) * 60_000 + Number(s) * 1000;
    });
    for (const [i, delay] of [100, 200, 400].entries()) {
      expect((times[i + 2] ?? 0) - (times[i + 1] ?? 0)).toBeGreaterThanOrEqual(delay - 2);
    }
    expect(await core.modelReady("looping", "")).toBe(false);
    expect(core.isReady()).toBe(false);
    const refused = await failure(core.infer(int32Request("looping", 1)));
    expect(refused.code).toBe("UNAVAILABLE");
    expect(refused.message).toMatch(
      /^model 'looping' is not available: its instance 'looping_0' failed to initialize: cannot start, and starts again in \d+ ms$/,
    );
    await neighboursAnswer(core);
    rmSync(flag);
    await waitFor(() => core.modelReady("looping", ""), { what: "looping ready again" });
    expect(core.isReady()).toBe(true);
    expect(await out(core, int32Request("looping", 1))).toEqual([11]);
  });

  it("a worker that dies right after each start is restarted with growing waits, not in a tight loop", async () => {
    const repo = tempRepository();
    const flag = join(repo, "die.flag");
    jsModel(
      repo,
      "flapping",
      INT32_IO,
      `import { existsSync } from "node:fs";
       export default class {
         initialize() { if (existsSync(${JSON.stringify(flag)})) setImmediate(() => process.exit(2)); }
         execute(requests) { return []; }
       }`,
    );
    writeFileSync(flag, "");
    const started = performance.now();
    // The load succeeds (initialize returns); the worker exits right after, every time.
    const { lines } = await startCore(repo, ["flapping"]);
    const restarts = () => lines().filter((l) => l.includes("model instance 'flapping_0' exited with code 2"));
    await waitFor(() => restarts().length >= 5, { what: "five restarts" });
    // 0 + 100 + 200 + 400 ms of waiting at least; a tight loop restarts dozens of times in that span.
    expect(performance.now() - started).toBeGreaterThanOrEqual(700);
    expect(restarts().map((l) => / in (\d+) ms$/.exec(l)?.[1] ?? "0")).toEqual(["0", "100", "200", "400", "800"]);
  });
});

describe("a load that does not finish", () => {
  it("fails after initialize_timeout_ms: the worker is stopped and the version is UNAVAILABLE with the reason", async () => {
    const repo = repository();
    jsModel(
      repo,
      "stuck",
      `${INT32_IO}\nparameters { key: "initialize_timeout_ms" value: { string_value: "300" } }`,
      `export default class { initialize() { return new Promise(() => {}); } execute() { return []; } }`,
    );
    const { core, failed } = await startCore(repo, ["simple", "steady", "stuck"]);
    expect(failed).toEqual(["stuck"]);
    const status = core.models.versionStates("stuck")?.get(1);
    expect(status?.state).toBe("UNAVAILABLE");
    expect(status?.reason).toContain(
      "unable to load model 'stuck': model instance 'stuck_0' did not finish initialize within 300 ms (initialize_timeout_ms)",
    );
    await neighboursAnswer(core);
  });

  it("an unload during a load whose initialize spins stops the worker at once, without waiting for the timeout", async () => {
    const repo = tempRepository();
    const started = join(repo, "initializing.flag");
    jsModel(
      repo,
      "spinning",
      INT32_IO,
      `import { writeFileSync } from "node:fs";
       export default class { initialize() { writeFileSync(${JSON.stringify(started)}, ""); for (;;) {} } execute() { return []; } }`,
    );
    const { core } = await startCore(repo, []);
    const load = failure(core.models.load("spinning"));
    await waitFor(() => existsSync(started), { what: "initialize to begin" });
    // The default initialize_timeout_ms (120 s) is far away: only the unload's cancellation ends the load.
    await core.models.unload("spinning");
    expect((await load).message).toContain("model instance 'spinning_0' was unloaded while it was initializing");
    expect(core.models.versionStates("spinning")?.get(1)?.state).toBe("UNAVAILABLE");
  });

  it("aborting the load's signal stops a hung initialize at once", async () => {
    const repo = tempRepository();
    jsModel(repo, "hung", INT32_IO, `export default class { initialize() { for (;;) {} } execute() { return []; } }`);
    const { log } = recordingLog();
    const backend = createJsBackend({ log, inference: () => ({}) as never });
    const { fromModelConfigJson } = await import("@galley/config");
    const config = fromModelConfigJson({
      name: "hung",
      backend: "js",
      input: [{ name: "IN", data_type: "TYPE_INT32", dims: [1] }],
      output: [{ name: "OUT", data_type: "TYPE_INT32", dims: [1] }],
      instance_group: [{ name: "hung", count: 1, kind: "KIND_CPU" }],
    });
    const controller = new AbortController();
    const loading = failure(
      backend.load({
        config,
        version: 1,
        modelPath: join(repo, "hung"),
        versionPath: join(repo, "hung", "1"),
        log,
        signal: controller.signal,
      }),
    );
    controller.abort();
    expect((await loading).message).toBe(
      "unable to load model 'hung': model instance 'hung_0' was unloaded while it was initializing",
    );
  });
});

describe("an ONNX Runtime model's worker_hot_wait_us", () => {
  it("is a whole number of µs up to one second; another value fails the load, the neighbours answer", async () => {
    const repo = repository();
    const { copyFileSync, readFileSync } = await import("node:fs");
    const variant = (name: string, value: string) => {
      mkdirSync(join(repo, name, "1"), { recursive: true });
      copyFileSync(join(repo, "simple", "1", "model.onnx"), join(repo, name, "1", "model.onnx"));
      const config = readFileSync(join(repo, "simple", "config.pbtxt"), "utf8").replace(
        /name: "simple"/,
        `name: "${name}"`,
      );
      writeFileSync(
        join(repo, name, "config.pbtxt"),
        `${config}\nparameters { key: "worker_hot_wait_us" value: { string_value: "${value}" } }\n`,
      );
    };
    variant("too_long", "1000001");
    variant("not_a_number", "1.5");
    variant("longest", "1000000");
    const { core, failed } = await startCore(repo, ["simple", "steady", "too_long", "not_a_number", "longest"]);
    expect(failed.sort()).toEqual(["not_a_number", "too_long"]);
    expect(core.models.versionStates("too_long")?.get(1)?.reason).toContain(
      "parameter 'worker_hot_wait_us' of model 'too_long' must be at most 1000000, got '1000001'",
    );
    expect(core.models.versionStates("not_a_number")?.get(1)?.reason).toContain(
      "parameter 'worker_hot_wait_us' of model 'not_a_number' must be a whole number, got '1.5'",
    );
    await neighboursAnswer(core);
  });
});
