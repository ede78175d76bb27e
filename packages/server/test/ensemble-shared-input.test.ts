// One tensor as two inputs of a scripted step (issue 48, item 16): an ensemble maps it to both,
// the step hands both back as outputs sharing one buffer, and two further steps each take one.
// Moving the first to its worker used to detach the other's bytes, and the second worker crashed
// ("Unable to deserialize cloned data"), failing its neighbours while it restarted.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, fp32Bytes, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

const IO = `max_batch_size: 0
  input { name: "A" data_type: TYPE_FP32 dims: [ -1 ] } input { name: "B" data_type: TYPE_FP32 dims: [ -1 ] }
  output { name: "OA" data_type: TYPE_FP32 dims: [ -1 ] } output { name: "OB" data_type: TYPE_FP32 dims: [ -1 ] }`;

/** OA = A, OB = B, as the views the model was given (so OA and OB share A and B's buffers). */
const ECHO = `export default class Echo {
  execute(requests) {
    return requests.map((r) => ({ outputs: [
      { name: "OA", datatype: "FP32", shape: r.input("A").shape, data: r.input("A").typed() },
      { name: "OB", datatype: "FP32", shape: r.input("B").shape, data: r.input("B").typed() },
    ] }));
  }
}`;

/** Fails a request whose two inputs arrive in one buffer. */
const OWN_BUFFERS = `export default class OwnBuffers {
  execute(requests) {
    return requests.map((r) => {
      if (r.input("A").data.buffer === r.input("B").data.buffer) return { error: "A and B share a buffer" };
      return { outputs: [
        { name: "OA", datatype: "FP32", shape: r.input("A").shape, data: r.input("A").typed() },
        { name: "OB", datatype: "FP32", shape: r.input("B").shape, data: r.input("B").typed() },
      ] };
    });
  }
}`;

function jsModel(repo: string, name: string, source: string): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "config.pbtxt"), `name: "${name}" backend: "js" ${IO}`);
  writeFileSync(join(repo, name, "1", "model.mjs"), source);
}

function step(model: string, a: string, b: string, outputs: Record<string, string>): string {
  const maps = Object.entries(outputs).map(([key, value]) => `output_map { key: "${key}" value: "${value}" }`);
  return `step { model_name: "${model}" model_version: -1
    input_map { key: "A" value: "${a}" } input_map { key: "B" value: "${b}" } ${maps.join(" ")} }`;
}

/** X → echo (as A and B) → P, Q; P → left → Y; Q → right → Z. */
function splitRepository(): string {
  const repo = tempRepository();
  jsModel(repo, "echo", ECHO);
  jsModel(repo, "left", ECHO);
  jsModel(repo, "right", ECHO);
  mkdirSync(join(repo, "split", "1"), { recursive: true });
  writeFileSync(
    join(repo, "split", "config.pbtxt"),
    `platform: "ensemble" max_batch_size: 0
     input { name: "X" data_type: TYPE_FP32 dims: [ -1 ] }
     output { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }
     output { name: "Z" data_type: TYPE_FP32 dims: [ -1 ] }
     ensemble_scheduling {
       ${step("echo", "X", "X", { OA: "P", OB: "Q" })}
       ${step("left", "P", "P", { OA: "Y" })}
       ${step("right", "Q", "Q", { OA: "Z" })} }`,
  );
  return repo;
}

async function inferJson(url: string, model: string, body: unknown): Promise<unknown> {
  const reply = await fetch(`${url}/v2/models/${model}/infer`, { method: "POST", body: JSON.stringify(body) });
  const json = (await reply.json()) as { outputs?: { name: string; data: number[] }[]; error?: string };
  return json.outputs ? json.outputs.map((o) => [o.name, o.data]) : json.error;
}

describe("one tensor as two inputs of a scripted step", () => {
  it("hands outputs that share a buffer on to two steps without crashing either instance", async () => {
    const { httpUrl, client } = await startServer({ modelRepositories: [splitRepository()], http: true });
    const url = httpUrl as string;
    const x = [1.5, -2, 3];
    const request = { inputs: [{ name: "X", datatype: "FP32", shape: [3], data: x }] };
    const results = await Promise.all(Array.from({ length: 4 }, () => inferJson(url, "split", request)));
    for (const result of results) {
      expect(result).toEqual([
        ["Y", x],
        ["Z", x],
      ]);
    }
    for (const name of ["left", "right"]) {
      const stats = (await client.modelStatistics({ name })).modelStats[0];
      expect(stats?.inferenceStats?.success?.count).toBe(4n);
      expect(stats?.inferenceStats?.fail?.count ?? 0n).toBe(0n);
    }
  });

  it("gives each input its own buffer in the worker, for binary inputs read from one body too", async () => {
    const repo = tempRepository();
    jsModel(repo, "own", OWN_BUFFERS);
    mkdirSync(join(repo, "twice", "1"), { recursive: true });
    writeFileSync(
      join(repo, "twice", "config.pbtxt"),
      `platform: "ensemble" max_batch_size: 0
       input { name: "X" data_type: TYPE_FP32 dims: [ -1 ] }
       output { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }
       output { name: "Z" data_type: TYPE_FP32 dims: [ -1 ] }
       ensemble_scheduling { ${step("own", "X", "X", { OA: "Y", OB: "Z" })} }`,
    );
    const { httpUrl } = await startServer({ modelRepositories: [repo], http: true });
    const url = httpUrl as string;
    const json = await inferJson(url, "twice", { inputs: [{ name: "X", datatype: "FP32", shape: [2], data: [4, 5] }] });
    expect(json).toEqual([
      ["Y", [4, 5]],
      ["Z", [4, 5]],
    ]);
    // Two binary inputs are views of one request body.
    const header = JSON.stringify({
      inputs: [
        { name: "A", datatype: "FP32", shape: [2], parameters: { binary_data_size: 8 } },
        { name: "B", datatype: "FP32", shape: [2], parameters: { binary_data_size: 8 } },
      ],
    });
    const reply = await fetch(`${url}/v2/models/own/infer`, {
      method: "POST",
      headers: { "Inference-Header-Content-Length": String(header.length) },
      body: Buffer.concat([Buffer.from(header), fp32Bytes([1, 2]), fp32Bytes([3, 4])]),
    });
    expect(await reply.json()).toMatchObject({ outputs: [{ data: [1, 2] }, { data: [3, 4] }] });
  });
});
