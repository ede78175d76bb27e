// Scripted models sharing worker threads (`isolation: "shared"`): placement, each instance's own
// module state, what a failure of one model does to its neighbours, and the load checks. Over
// real gRPC, with real worker threads.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { parseServeArgs } from "../src/cli/serve-options.js";
import {
  cleanup,
  expectGrpcError,
  type InferenceClient,
  readInt32,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

const SHARED = `parameters { key: "isolation" value: { string_value: "shared" } }`;

/**
 * OUT = IN + 1, with the thread it ran on, how many executes its module counted and its instance
 * name as response parameters; IN < 0 misbehaves.
 */
const WHERE = `
import { threadId } from "node:worker_threads";
let executes = 0;
export default class Where {
  initialize(args) { this.instance = args.model_instance_name; }
  async execute(requests) {
    const n = requests[0].input("IN").typed()[0];
    if (n === -3) process.exit(3);
    if (n === -5) for (;;) {}
    if (n === -6) await new Promise(() => {});
    if (n === -7) await new Promise((resolve) => setTimeout(resolve, 600));
    if (n === -8) { const end = Date.now() + 1500; while (Date.now() < end) {} }
    executes += 1;
    return requests.map((r) => ({
      outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(r.input("IN").typed()[0] + 1) }],
      parameters: { thread: threadId, executes, instance: this.instance },
    }));
  }
}`;

function model(repo: string, name: string, config: string, source = WHERE): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"\nbackend: "js"\nmax_batch_size: 0\n` +
      `input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n` +
      `output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n${config}\n`,
  );
  writeFileSync(join(repo, name, "1", "model.mjs"), source);
}

function request(modelName: string, value: number) {
  return {
    modelName,
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
    rawInputContents: [new Uint8Array(Int32Array.of(value).buffer)],
  };
}

type Answer = { out: number; thread: number; executes: number; instance: string };

async function ask(client: InferenceClient, name: string, value = 1): Promise<Answer> {
  const response = await client.modelInfer(request(name, value));
  const parameter = (key: string) => response.parameters[key]?.parameterChoice.value;
  return {
    out: readInt32(response.rawOutputContents[0])[0] as number,
    thread: Number(parameter("thread")),
    executes: Number(parameter("executes")),
    instance: String(parameter("instance")),
  };
}

/** Ask until every instance of `name` has answered at least once (instances take turns). */
async function everyInstance(client: InferenceClient, name: string, count: number) {
  const seen = new Map<string, Answer>();
  while (seen.size < count) {
    const answers = await Promise.all(Array.from({ length: 4 }, () => ask(client, name)));
    for (const answer of answers) seen.set(answer.instance, answer);
  }
  return seen;
}

describe("isolation: shared", () => {
  it("puts instance n of every shared model on shared thread n; a model of its own keeps its thread", async () => {
    const repo = tempRepository();
    model(repo, "left", `instance_group [ { count: 2 kind: KIND_CPU } ]\n${SHARED}`);
    model(repo, "right", SHARED);
    model(repo, "alone", "");
    const { client } = await startServer({ modelRepositories: [repo] });
    const left = await everyInstance(client, "left", 2);
    const right = await ask(client, "right");
    const alone = await ask(client, "alone");
    const [first, second] = [left.get("left_0_0")?.thread, left.get("left_0_1")?.thread];
    expect(right.out).toBe(2);
    expect(first).toBe(right.thread);
    expect(second).not.toBe(first);
    expect(alone.thread).not.toBe(first);
    expect(alone.thread).not.toBe(second);
  });

  it("gives each instance its own module: a reloaded model starts counting again", async () => {
    const repo = tempRepository();
    model(repo, "counter", SHARED);
    model(repo, "neighbour", SHARED);
    const { client, server } = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["*"],
    });
    await ask(client, "neighbour");
    expect((await ask(client, "counter")).executes).toBe(1);
    expect((await ask(client, "counter")).executes).toBe(2);
    await server.core.models.unload("counter");
    await server.core.models.load("counter");
    expect((await ask(client, "counter")).executes).toBe(1);
    // The neighbour's module was never imported again.
    expect((await ask(client, "neighbour")).executes).toBe(2);
  });

  it("a model that ends the thread restarts its neighbours too, and every one of them serves again", async () => {
    const repo = tempRepository();
    model(repo, "exits", SHARED);
    model(repo, "neighbour", SHARED);
    const { client } = await startServer({ modelRepositories: [repo] });
    const before = await ask(client, "neighbour");
    await expectGrpcError(
      client.modelInfer(request("exits", -3)),
      Code.Internal,
      "model instance 'exits_0' lost its shared thread (exited with code 3); the instance is restarting",
    );
    const after = await ask(client, "neighbour");
    expect(after.out).toBe(2);
    expect(after.thread).not.toBe(before.thread);
    expect(after.executes).toBe(1);
    expect((await ask(client, "exits")).thread).toBe(after.thread);
  });

  it("an execute past its timeout that still lets the thread run is detached alone: the neighbour's request in flight completes", async () => {
    const repo = tempRepository();
    model(repo, "hangs", `${SHARED}\nparameters { key: "execute_timeout_ms" value: { string_value: "300" } }`);
    model(repo, "neighbour", SHARED);
    const { client } = await startServer({ modelRepositories: [repo] });
    const before = await ask(client, "neighbour");
    const hung = expectGrpcError(
      client.modelInfer(request("hangs", -6)),
      Code.Internal,
      "model instance 'hangs_0' did not finish execute within 300 ms (execute_timeout_ms); the instance is restarting",
    );
    const slow = ask(client, "neighbour", -7);
    await hung;
    const during = await slow;
    expect(during.thread).toBe(before.thread);
    expect(during.executes).toBe(2);
    expect((await ask(client, "hangs")).thread).toBe(before.thread);
  });

  it("an endless loop blocks the thread: it is stopped, the neighbours restart on a new one", async () => {
    const repo = tempRepository();
    model(repo, "spins", `${SHARED}\nparameters { key: "execute_timeout_ms" value: { string_value: "300" } }`);
    model(repo, "neighbour", SHARED);
    const { client } = await startServer({ modelRepositories: [repo] });
    const before = await ask(client, "neighbour");
    await expectGrpcError(
      client.modelInfer(request("spins", -5)),
      Code.Internal,
      "model instance 'spins_0' did not finish execute within 300 ms (execute_timeout_ms); the instance is restarting",
    );
    const after = await ask(client, "neighbour");
    expect(after.thread).not.toBe(before.thread);
    expect(after.executes).toBe(1);
  });

  it("a neighbour's long synchronous execute does not take the thread down when another instance is stopped", async () => {
    const repo = tempRepository();
    model(repo, "busy", SHARED);
    model(repo, "leaving", `${SHARED}\nparameters { key: "execute_timeout_ms" value: { string_value: "300" } }`);
    const { client } = await startServer({ modelRepositories: [repo] });
    const before = await ask(client, "busy");
    await ask(client, "leaving");
    // busy holds the thread with 1.5 s of synchronous work; leaving's execute times out behind
    // it and its detach cannot be answered within 1 s, but the thread runs busy's code, not
    // leaving's: leaving is let go of alone.
    const slow = ask(client, "busy", -8);
    await expectGrpcError(
      client.modelInfer(request("leaving", -6)),
      Code.Internal,
      "model instance 'leaving_0' did not finish execute within 300 ms (execute_timeout_ms); the instance is restarting",
    );
    const during = await slow;
    expect(during.thread).toBe(before.thread);
    expect(during.executes).toBe(2);
    expect((await ask(client, "busy")).executes).toBe(3);
    expect((await ask(client, "leaving")).thread).toBe(before.thread);
  });

  it("a model that is starting when a neighbour ends the thread starts again and loads", async () => {
    const repo = tempRepository();
    model(repo, "exits", SHARED);
    const starting = join(repo, "starting");
    const go = join(repo, "go");
    model(
      repo,
      "late",
      SHARED,
      WHERE.replace(
        "initialize(args) {",
        `async initialize(args) {
           const fs = await import("node:fs");
           fs.appendFileSync(${JSON.stringify(starting)}, "x");
           while (!fs.existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 10));`,
      ),
    );
    const { client, server } = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["exits"],
    });
    const loading = server.core.models.load("late");
    await waitFor(() => existsSync(starting), { what: "late's initialize to begin" });
    await expectGrpcError(client.modelInfer(request("exits", -3)), Code.Internal);
    writeFileSync(go, "");
    await loading;
    expect((await ask(client, "late")).out).toBe(2);
    // Its initialize ran twice: once on the thread that ended, once on the new one.
    expect(readFileSync(starting, "utf8")).toBe("xx");
  });

  it("runs a shared model's auto-complete on the shared thread", async () => {
    const repo = tempRepository();
    mkdirSync(join(repo, "completed", "1"), { recursive: true });
    const marker = join(repo, "completed-on.txt");
    writeFileSync(
      join(repo, "completed", "config.pbtxt"),
      `backend: "js"\n${SHARED}\nparameters { key: "marker" value: { string_value: "${marker}" } }\n`,
    );
    writeFileSync(
      join(repo, "completed", "1", "model.mjs"),
      `import { writeFileSync } from "node:fs";
       import { workerData } from "node:worker_threads";
       export default class Completed {
         static autoCompleteConfig(config) {
           config.max_batch_size = 0;
           config.input = [{ name: "IN", data_type: "TYPE_INT32", dims: [1] }];
           config.output = [{ name: "OUT", data_type: "TYPE_INT32", dims: [1] }];
           writeFileSync(config.parameters.marker.string_value, String(workerData?.shared));
           return config;
         }
         execute(requests) {
           return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").typed() }] }));
         }
       }`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const config = await client.modelConfig({ name: "completed" });
    const response = await client.modelInfer(request("completed", 7));
    expect(readInt32(response.rawOutputContents[0])).toEqual([7]);
    expect(config.config?.maxBatchSize).toBe(0);
    expect(config.config?.input.map((i) => i.name)).toEqual(["IN"]);
    // Run by a shared thread (a throw-away one has no workerData).
    expect(readFileSync(marker, "utf8")).toBe("true");
  });

  it.each([
    [
      `parameters { key: "isolation" value: { string_value: "process" } }`,
      "parameter 'isolation' of model 'bad' must be 'thread' or 'shared', got 'process'",
    ],
    [
      `${SHARED}\nparameters { key: "memory_limit_mb" value: { string_value: "64" } }`,
      "parameter 'memory_limit_mb' of model 'bad' needs isolation 'thread': a shared thread's memory cannot be limited per instance",
    ],
  ])("fails the load of %s", async (config, message) => {
    const repo = tempRepository();
    model(repo, "bad", config);
    const { client } = await startServer({ modelRepositories: [repo], controlMode: "explicit" });
    const error = await expectGrpcError(client.repositoryModelLoad({ modelName: "bad" }), Code.InvalidArgument);
    expect(error.rawMessage).toContain(message);
  });

  it("--backend-config js,default-isolation=shared shares the threads of models that set none", async () => {
    const options = parseServeArgs(["--model-repository", "/m", "--backend-config", "js,default-isolation=shared"]);
    expect(options !== "help" && options.server.jsDefaultIsolation).toBe("shared");
    expect(() =>
      parseServeArgs(["--model-repository", "/m", "--backend-config", "js,default-isolation=process"]),
    ).toThrow("--backend-config 'js,default-isolation=process': default-isolation must be thread or shared");
    const repo = tempRepository();
    model(repo, "one", "");
    model(repo, "two", "");
    model(repo, "own", `parameters { key: "isolation" value: { string_value: "thread" } }`);
    model(repo, "limited", `parameters { key: "memory_limit_mb" value: { string_value: "64" } }`);
    const { client } = await startServer({ modelRepositories: [repo], jsDefaultIsolation: "shared" });
    const [one, two, own] = [await ask(client, "one"), await ask(client, "two"), await ask(client, "own")];
    expect(one.thread).toBe(two.thread);
    expect(own.thread).not.toBe(one.thread);
    // A memory limit needs a thread of its own: the default gives way to it.
    const limited = await ask(client, "limited");
    expect([one.thread, own.thread]).not.toContain(limited.thread);
  });
});
