// Scripted models (backend "js"): lifecycle, isolation failures, BLS and the example models, over
// real gRPC. Models written for a test live in a temporary repository next to copies of examples.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  bytesTensor,
  cleanup,
  expectGrpcError,
  fp32Bytes,
  readFp32,
  readInt32,
  simpleRequest,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

const INT32_IO = `
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`;

/** Write a scripted model into `repo`: `config` is appended to name/backend, `source` is model.mjs. */
function jsModel(repo: string, name: string, config: string, source: string, file = "model.mjs"): string {
  const folder = join(repo, name);
  mkdirSync(join(folder, "1"), { recursive: true });
  writeFileSync(join(folder, "config.pbtxt"), `name: "${name}"\nbackend: "js"\n${config}\n`);
  writeFileSync(join(folder, "1", file), source);
  return folder;
}

/** A model that answers OUT = IN + 1, or misbehaves when IN says so. */
const FRAGILE = `
export default class Fragile {
  execute(requests) {
    const n = requests[0].input("IN").typed()[0];
    if (n === -1) throw Object.assign(new Error("asked to fail"), { code: "INVALID_ARG" });
    if (n === -2) { Promise.reject(new Error("nobody handles this")); return new Promise(() => {}); }
    if (n === -3) process.exit(3);
    if (n === -4) { const hog = []; for (;;) hog.push(new Array(1e6).fill(Math.random())); }
    if (n === -5) { for (;;) {} }
    return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(r.input("IN").typed()[0] + 1) }] }));
  }
}`;

function int32Request(model: string, value: number, id = "") {
  return {
    modelName: model,
    id,
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
    rawInputContents: [Int32Array.of(value).buffer].map((b) => new Uint8Array(b)),
  };
}

describe("a scripted model's lifecycle", () => {
  it("passes Triton's initialize args, runs execute per request and finalize at unload", async () => {
    const repo = tempRepository();
    const marker = join(repo, "finalized.txt");
    jsModel(
      repo,
      "lifecycle",
      `max_batch_size: 0\n${INT32_IO}\ninstance_group [ { count: 2 kind: KIND_CPU } ]\nparameters { key: "marker" value: { string_value: "${marker}" } }`,
      `import { appendFileSync } from "node:fs";
       export default class Lifecycle {
         initialize(args) { this.args = args; this.config = JSON.parse(args.model_config); }
         execute(requests) {
           return requests.map(() => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1],
             data: Int32Array.of(Number(this.args.model_instance_name.split("_").pop()) * 100 + Number(this.args.model_version)) }],
             parameters: { name: this.args.model_instance_name } }));
         }
         finalize() { appendFileSync(this.config.parameters.marker.string_value, this.args.model_instance_name + " " + this.args.model_instance_kind + "\\n"); }
       }`,
    );
    const { client, server } = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["lifecycle"],
    });
    const seen = new Set<number>();
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        const response = await client.modelInfer(int32Request("lifecycle", 0));
        seen.add(readInt32(response.rawOutputContents[0])[0] as number);
      }),
    );
    // Both instances (lifecycle_0_0 and lifecycle_0_1: group lifecycle_0) of version 1 served, each with its own args.
    expect([...seen].every((v) => v === 1 || v === 101)).toBe(true);
    await server.core.models.unload("lifecycle");
    expect(readFileSync(marker, "utf8").split("\n").filter(Boolean).sort()).toEqual([
      "lifecycle_0_0 KIND_CPU",
      "lifecycle_0_1 KIND_CPU",
    ]);
  });

  it("loads a TypeScript model with relative imports", async () => {
    const repo = tempRepository();
    const folder = jsModel(
      repo,
      "typed",
      `max_batch_size: 0\n${INT32_IO}`,
      `import { triple } from "./helper.js";
       import type { Model, Request, Response } from "@galley/server/model";
       export default class Typed implements Model {
         execute(requests: readonly Request[]): Response[] {
           return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(triple((r.input("IN")?.typed() as Int32Array)[0] ?? 0)) }] }));
         }
       }`,
      "model.ts",
    );
    writeFileSync(join(folder, "1", "helper.ts"), "export const triple = (x: number): number => 3 * x;\n");
    const { client } = await startServer({ modelRepositories: [repo] });
    expect(readInt32((await client.modelInfer(int32Request("typed", 14))).rawOutputContents[0])).toEqual([42]);
  });

  it("fills the config from a static autoCompleteConfig", async () => {
    const repo = tempRepository();
    jsModel(
      repo,
      "completed",
      "",
      `export default class Completed {
         static autoCompleteConfig(config) {
           return { ...config, max_batch_size: 4,
             input: [{ name: "IN", data_type: "TYPE_INT32", dims: [1] }],
             output: [{ name: "OUT", data_type: "TYPE_INT32", dims: [1] }] };
         }
         execute(requests) { return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1, 1], data: r.input("IN").typed() }] })); }
       }`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const config = (await client.modelConfig({ name: "completed" })).config;
    expect(config?.maxBatchSize).toBe(4);
    expect(config?.input.map((i) => i.name)).toEqual(["IN"]);
  });

  it("answers model readiness from the model's isReady()", async () => {
    const repo = tempRepository();
    const flag = join(repo, "ready.flag");
    jsModel(
      repo,
      "gated",
      `max_batch_size: 0\n${INT32_IO}`,
      `import { existsSync } from "node:fs";
       export default class { isReady() { return existsSync(${JSON.stringify(flag)}); } execute(r) { return []; } }`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    expect((await client.modelReady({ name: "gated" })).ready).toBe(false);
    writeFileSync(flag, "");
    expect((await client.modelReady({ name: "gated" })).ready).toBe(true);
  });

  it("fails the load with the model's error when initialize throws, and the server stays up", async () => {
    const repo = tempRepository(["simple"]);
    jsModel(
      repo,
      "broken",
      `max_batch_size: 0\n${INT32_IO}`,
      `export default class { initialize() { throw new Error("no weights found"); } execute() {} }`,
    );
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual(["broken"]);
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "broken")?.reason).toContain("no weights found");
    expect((await client.modelInfer(simpleRequest(Array(16).fill(1), Array(16).fill(2)))).modelName).toBe("simple");
  });
});

describe("isolation: what a model does to its instance stays in that instance", () => {
  async function fragileServer(parameters = "") {
    const repo = tempRepository(["simple"]);
    jsModel(repo, "fragile", `max_batch_size: 0\n${INT32_IO}\n${parameters}`, FRAGILE);
    return startServer({ modelRepositories: [repo] });
  }

  it("a throw fails that request with the model's message and code; the next one succeeds", async () => {
    const { client } = await fragileServer();
    await expectGrpcError(client.modelInfer(int32Request("fragile", -1)), 3, "asked to fail");
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it.each([
    [-2, "crashed: nobody handles this"],
    [-3, "exited with code 3"],
  ])(
    "IN=%i kills the worker: the request fails (%s), the instance restarts, other models never notice",
    async (n, what) => {
      const { client } = await fragileServer();
      const neighbour = Promise.all(
        Array.from({ length: 20 }, () => client.modelInfer(simpleRequest(Array(16).fill(1), Array(16).fill(2)))),
      );
      await expectGrpcError(
        client.modelInfer(int32Request("fragile", n)),
        13,
        `model instance 'fragile_0' ${what}; the instance is restarting`,
      );
      expect((await neighbour).length).toBe(20);
      expect(readInt32((await client.modelInfer(int32Request("fragile", 41))).rawOutputContents[0])).toEqual([42]);
      expect((await client.serverLive({})).live).toBe(true);
    },
  );

  it("running out of its memory limit (memory_limit_mb) restarts the instance", async () => {
    const { client } = await fragileServer(`parameters { key: "memory_limit_mb" value: { string_value: "48" } }`);
    await expectGrpcError(
      client.modelInfer(int32Request("fragile", -4)),
      13,
      "model instance 'fragile_0' ran out of memory (memory_limit_mb 48); the instance is restarting",
    );
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it("an execute past execute_timeout_ms is stopped and the instance restarts; the event loop never blocked", async () => {
    const { client } = await fragileServer(`parameters { key: "execute_timeout_ms" value: { string_value: "300" } }`);
    const stuck = expectGrpcError(
      client.modelInfer(int32Request("fragile", -5)),
      13,
      "model instance 'fragile_0' did not finish execute within 300 ms (execute_timeout_ms); the instance is restarting",
    );
    // While the model spins, the server answers other requests.
    const during = await client.modelInfer(simpleRequest(Array(16).fill(1), Array(16).fill(2)));
    expect(during.modelName).toBe("simple");
    await stuck;
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it.each(["thread", "shared"])(
    "an unload (isolation %s) waits --exit-timeout-secs for an execute that never returns, then stops it",
    async (isolation) => {
      const repo = tempRepository();
      const marker = join(repo, "spinning");
      jsModel(
        repo,
        "spinner",
        `max_batch_size: 0\n${INT32_IO}
parameters { key: "execute_timeout_ms" value: { string_value: "0" } }
parameters { key: "isolation" value: { string_value: "${isolation}" } }`,
        `import { writeFileSync } from "node:fs";
         export default class Spinner {
           execute() { writeFileSync(${JSON.stringify(marker)}, ""); for (;;) {} }
         }`,
      );
      const { client } = await startServer({
        modelRepositories: [repo],
        exitTimeoutSecs: 1,
        controlMode: "explicit",
        loadModels: ["spinner"],
      });
      const stuck = expectGrpcError(
        client.modelInfer(int32Request("spinner", 1)),
        13,
        "model instance 'spinner_0' was unloaded before its execute returned",
      );
      await waitFor(() => existsSync(marker), { what: "execute to start" });
      const start = performance.now();
      await client.repositoryModelUnload({ modelName: "spinner" });
      const seconds = (performance.now() - start) / 1000;
      expect(seconds).toBeGreaterThanOrEqual(0.9);
      expect(seconds).toBeLessThan(5);
      await stuck;
      await client.repositoryModelLoad({ modelName: "spinner" });
      expect((await client.modelReady({ name: "spinner" })).ready).toBe(true);
    },
  );
});

describe("example scripted models", () => {
  it("simple_identity returns BYTES byte for byte, NUL bytes and binary blobs included", async () => {
    const { client } = await startServer();
    const elements = [
      new Uint8Array([0, 1, 2, 3]),
      new TextEncoder().encode("a\u0000b"),
      new Uint8Array(0),
      new Uint8Array([255, 0, 254]),
    ];
    const response = await client.modelInfer({
      modelName: "simple_identity",
      inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1n, 4n] }],
      rawInputContents: [bytesTensor(elements)],
    });
    expect(response.outputs[0]?.shape).toEqual([1n, 4n]);
    expect(response.rawOutputContents[0]).toEqual(bytesTensor(elements));
  });

  it("add_sub (TypeScript) adds and subtracts FP32", async () => {
    const { client } = await startServer();
    const response = await client.modelInfer({
      modelName: "add_sub",
      inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, datatype: "FP32", shape: [4n] })),
      rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([0.5, 0.5, 0.5, 0.5])],
    });
    expect(readFp32(response.rawOutputContents[0])).toEqual([1.5, 2.5, 3.5, 4.5]);
    expect(readFp32(response.rawOutputContents[1])).toEqual([0.5, 1.5, 2.5, 3.5]);
  });

  function blsRequest(model: string, target: string) {
    return {
      modelName: model,
      inputs: [
        { name: "MODEL_NAME", datatype: "BYTES", shape: [1n] },
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [bytesTensor([target]), fp32Bytes([1, 2, 3, 4]), fp32Bytes([10, 20, 30, 40])],
    };
  }

  it.each(["bls_sync", "bls_async"])("%s calls add_sub through BLS and returns its outputs", async (model) => {
    const { client } = await startServer();
    const response = await client.modelInfer(blsRequest(model, "add_sub"));
    expect(response.outputs.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
    expect(readFp32(response.rawOutputContents[0])).toEqual([11, 22, 33, 44]);
    expect(readFp32(response.rawOutputContents[1])).toEqual([-9, -18, -27, -36]);
    // add_sub counted the BLS calls as its own inferences: one (sync) or two (async, in parallel).
    const stats = await client.modelStatistics({ name: "add_sub" });
    expect(stats.modelStats[0]?.inferenceCount).toBe(model === "bls_sync" ? 1n : 2n);
  });

  it("a BLS call's error reaches the caller as an exception, and into the response with the callee's text", async () => {
    const { client } = await startServer();
    await expectGrpcError(
      client.modelInfer(blsRequest("bls_sync", "no_such_model")),
      5,
      "Request for unknown model: 'no_such_model' is not found",
    );
    // A BLS call into a decoupled model without streaming is refused with a clear message.
    await expectGrpcError(
      client.modelInfer(blsRequest("bls_sync", "square_int32")),
      12,
      /^model 'square_int32' is decoupled/,
    );
  });

  it("BLS reaches ensembles too", async () => {
    const repo = tempRepository(["simple", "ensemble_add_sub"]);
    jsModel(
      repo,
      "via_ensemble",
      `max_batch_size: 0
       input [ { name: "A" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]
       output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]`,
      `export default class {
         async execute(requests, ctx) {
           const a = requests[0].input("A");
           const reply = await ctx.infer({ model: "ensemble_add_sub", inputs: [{ ...a, name: "INPUT0" }, { ...a, name: "INPUT1" }], outputs: ["OUTPUT0"] });
           return [{ outputs: [{ ...reply.output("OUTPUT0"), name: "SUM" }] }];
         }
       }`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const a = Array.from({ length: 16 }, (_, i) => i);
    const response = await client.modelInfer({
      modelName: "via_ensemble",
      inputs: [{ name: "A", datatype: "INT32", shape: [1n, 16n] }],
      rawInputContents: [new Uint8Array(Int32Array.from(a).buffer)],
    });
    expect(readInt32(response.rawOutputContents[0])).toEqual(a.map((v) => 2 * v));
  });

  it("keeps the example repository's models READY", async () => {
    const { client } = await startServer();
    for (const name of [
      "simple_identity",
      "add_sub",
      "repeat_int32",
      "square_int32",
      "bls_sync",
      "bls_async",
      "bls_decoupled",
    ]) {
      expect((await client.modelReady({ name })).ready, name).toBe(true);
    }
  });
});
