// Ensembles answer as Triton's ensemble scheduler does (core src/ensemble_scheduler/ensemble_scheduler.cc):
// the batch dimension is added or removed between batching and non-batching models (ReshapeTensorDims),
// zero-sized tensors included; steps whose outputs lead to no requested output do not run; and every
// response carries the sequence its outputs were made in (sequence_id, sequence_start, sequence_end).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ModelInferRequestSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { postJson } from "./http-fixture.js";
import {
  bytesTensor,
  cleanup,
  fp32Bytes,
  type InferenceClient,
  int32Bytes,
  pushable,
  readBytesTensor,
  readFp32,
  readInt32,
  sequenceParameters,
  startServer,
  tempRepository,
} from "./support/harness.js";

type ModelInferRequestInit = MessageInitShape<typeof ModelInferRequestSchema>;

afterEach(cleanup);

/** Write a model (config and, for a scripted one, its source) into `repo`. */
function model(repo: string, name: string, config: string, source?: string): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "config.pbtxt"), `name: "${name}"\n${config}`);
  if (source !== undefined) writeFileSync(join(repo, name, "1", "model.mjs"), source);
}

const IDENTITY = `export default class {
  execute(requests) {
    return requests.map((r) => {
      const input = r.input("INPUT0");
      return { outputs: [{ name: "OUTPUT0", datatype: "BYTES", shape: input.shape, data: input.data }] };
    });
  }
}`;

const DOUBLE = `export default class {
  execute(requests) {
    return requests.map((r) => {
      const input = r.input("INPUT0");
      return { outputs: [{ name: "OUTPUT0", datatype: "INT32", shape: input.shape, data: input.typed().map((x) => 2 * x) }] };
    });
  }
}`;

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, (_, i) => 3 * i - 7);

async function inferenceCount(client: InferenceClient, name: string): Promise<bigint> {
  return (await client.modelStatistics({ name })).modelStats[0]?.inferenceCount ?? 0n;
}

describe("ensembles across the batch dimension", () => {
  it("feed a batching model from a non-batching ensemble and strip the dimension again, empty tensors included", async () => {
    const repo = tempRepository(["simple", "simple_identity"]);
    model(
      repo,
      "flat",
      `platform: "ensemble" max_batch_size: 0
       input { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } input { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }
       output { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } output { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] }
       ensemble_scheduling { step { model_name: "simple" model_version: -1
         input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
         output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } } }`,
    );
    model(
      repo,
      "flat_bytes",
      `platform: "ensemble" max_batch_size: 0
       input { name: "IN" data_type: TYPE_STRING dims: [ -1 ] }
       output { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] }
       ensemble_scheduling { step { model_name: "simple_identity" model_version: -1
         input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } }`,
    );
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);

    const flat = await client.modelInfer({
      modelName: "flat",
      inputs: [
        { name: "A", datatype: "INT32", shape: [16n] },
        { name: "B", datatype: "INT32", shape: [16n] },
      ],
      rawInputContents: [int32Bytes(A), int32Bytes(B)],
    });
    expect(flat.outputs.map((o) => [o.name, o.shape])).toEqual([
      ["SUM", [16n]],
      ["DIFF", [16n]],
    ]);
    expect(readInt32(flat.rawOutputContents[0])).toEqual(A.map((a, i) => a + (B[i] ?? 0)));

    const empty = await client.modelInfer({
      modelName: "flat_bytes",
      inputs: [{ name: "IN", datatype: "BYTES", shape: [0n] }],
      rawInputContents: [new Uint8Array(0)],
    });
    expect(empty.outputs.map((o) => [o.name, o.datatype, o.shape])).toEqual([["OUT", "BYTES", [0n]]]);
    const three = await client.modelInfer({
      modelName: "flat_bytes",
      inputs: [{ name: "IN", datatype: "BYTES", shape: [3n] }],
      rawInputContents: [bytesTensor(["a", "", "c"])],
    });
    expect(three.outputs[0]?.shape).toEqual([3n]);
    expect(readBytesTensor(three.rawOutputContents[0])).toEqual(["a", "", "c"]);
  });

  it("feed a non-batching model from a batching ensemble and give the batch dimension back, empty tensors included", async () => {
    const repo = tempRepository(["add_sub"]);
    model(
      repo,
      "identity_flat",
      `backend: "js" max_batch_size: 0
       input { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] }
       output { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] }`,
      IDENTITY,
    );
    model(
      repo,
      "batched",
      `platform: "ensemble" max_batch_size: 8
       input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } input { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }
       output { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }
       ensemble_scheduling { step { model_name: "add_sub" model_version: -1
         input_map { key: "INPUT0" value: "X" } input_map { key: "INPUT1" value: "Y" }
         output_map { key: "OUTPUT0" value: "SUM" } } }`,
    );
    model(
      repo,
      "batched_bytes",
      `platform: "ensemble" max_batch_size: 8
       input { name: "IN" data_type: TYPE_STRING dims: [ -1 ] }
       output { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] }
       ensemble_scheduling { step { model_name: "identity_flat" model_version: -1
         input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } }`,
    );
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);

    const batched = await client.modelInfer({
      modelName: "batched",
      inputs: [
        { name: "X", datatype: "FP32", shape: [1n, 4n] },
        { name: "Y", datatype: "FP32", shape: [1n, 4n] },
      ],
      rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([10, 20, 30, 40])],
    });
    expect(batched.outputs.map((o) => [o.name, o.shape])).toEqual([["SUM", [1n, 4n]]]);
    expect(readFp32(batched.rawOutputContents[0])).toEqual([11, 22, 33, 44]);

    const empty = await client.modelInfer({
      modelName: "batched_bytes",
      inputs: [{ name: "IN", datatype: "BYTES", shape: [1n, 0n] }],
      rawInputContents: [new Uint8Array(0)],
    });
    expect(empty.outputs.map((o) => [o.name, o.shape])).toEqual([["OUT", [1n, 0n]]]);
    const two = await client.modelInfer({
      modelName: "batched_bytes",
      inputs: [{ name: "IN", datatype: "BYTES", shape: [1n, 2n] }],
      rawInputContents: [bytesTensor(["x", "yz"])],
    });
    expect(two.outputs[0]?.shape).toEqual([1n, 2n]);
    expect(readBytesTensor(two.rawOutputContents[0])).toEqual(["x", "yz"]);
  });
});

describe("ensemble steps nobody needs", () => {
  it("do not run: ensemble_add_sub asked for OUTPUT0 runs the three steps behind it, not six", async () => {
    const { client } = await startServer();
    const before = await inferenceCount(client, "simple");
    const response = await client.modelInfer({
      modelName: "ensemble_add_sub",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
      ],
      outputs: [{ name: "OUTPUT0" }],
      rawInputContents: [int32Bytes(A), int32Bytes(B)],
    });
    expect(response.outputs.map((o) => o.name)).toEqual(["OUTPUT0"]);
    expect(readInt32(response.rawOutputContents[0])).toEqual(A.map((a, i) => a + (B[i] ?? 0)));
    expect((await inferenceCount(client, "simple")) - before).toBe(3n);
  });

  it("leave the statistics of a composing model that only unrequested outputs need at 0", async () => {
    const repo = tempRepository(["simple"]);
    model(
      repo,
      "double",
      `backend: "js" max_batch_size: 8
       input { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }
       output { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }`,
      DOUBLE,
    );
    // SUM from simple; QUAD from double twice, through an intermediate tensor.
    model(
      repo,
      "sum_quad",
      `platform: "ensemble" max_batch_size: 8
       input { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } input { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }
       output { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } output { name: "QUAD" data_type: TYPE_INT32 dims: [ 16 ] }
       ensemble_scheduling {
         step { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
                output_map { key: "OUTPUT0" value: "SUM" } }
         step { model_name: "double" model_version: -1 input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "TWICE" } }
         step { model_name: "double" model_version: -1 input_map { key: "INPUT0" value: "TWICE" } output_map { key: "OUTPUT0" value: "QUAD" } }
       }`,
    );
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);
    const ask = (outputs: string[]) =>
      client.modelInfer({
        modelName: "sum_quad",
        inputs: [
          { name: "A", datatype: "INT32", shape: [1n, 16n] },
          { name: "B", datatype: "INT32", shape: [1n, 16n] },
        ],
        outputs: outputs.map((name) => ({ name })),
        rawInputContents: [int32Bytes(A), int32Bytes(B)],
      });

    const sum = await ask(["SUM"]);
    expect(sum.outputs.map((o) => o.name)).toEqual(["SUM"]);
    expect(await inferenceCount(client, "double")).toBe(0n);
    expect(await inferenceCount(client, "simple")).toBe(1n);

    const quad = await ask(["QUAD"]);
    expect(readInt32(quad.rawOutputContents[0])).toEqual(A.map((a) => 4 * a));
    expect(await inferenceCount(client, "double")).toBe(2n);
    expect(await inferenceCount(client, "simple")).toBe(1n);

    const both = await ask([]);
    expect(both.outputs.map((o) => o.name)).toEqual(["SUM", "QUAD"]);
    expect(await inferenceCount(client, "double")).toBe(4n);
    expect(await inferenceCount(client, "simple")).toBe(2n);
  });
});

describe("ensemble responses", () => {
  it("carry the request's sequence_id, sequence_start and sequence_end on each ModelStreamInfer response", async () => {
    const { client } = await startServer();
    const requests = pushable<ModelInferRequestInit>();
    const ask = (id: string, parameters: ModelInferRequestInit["parameters"]) =>
      requests.push({
        modelName: "ensemble_add_sub",
        id,
        parameters,
        inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, datatype: "INT32", shape: [1n, 16n] })),
        rawInputContents: [int32Bytes(A), int32Bytes(B)],
      });
    ask("a", sequenceParameters(42n, true, false));
    ask("b", sequenceParameters("corr-7", false, true));
    ask("c", {});
    requests.end();
    const seen: Record<string, unknown>[] = [];
    for await (const response of client.modelStreamInfer(requests)) {
      expect(response.errorMessage).toBe("");
      const parameters = response.inferResponse?.parameters ?? {};
      seen.push(Object.fromEntries(Object.entries(parameters).map(([k, v]) => [k, v.parameterChoice.value])));
    }
    expect(seen).toEqual([
      { sequence_id: 42n, sequence_start: true, sequence_end: false, triton_final_response: true },
      { sequence_id: "corr-7", sequence_start: false, sequence_end: true, triton_final_response: true },
      { sequence_id: 0n, sequence_start: false, sequence_end: false, triton_final_response: true },
    ]);
  });

  it("carry sequence id 0 and both flags false without a sequence, on REST too; a plain model's do not", async () => {
    const { httpUrl } = await startServer({ http: true });
    const port = Number(new URL(httpUrl ?? "").port);
    const body = {
      inputs: ["INPUT0", "INPUT1"].map((name, i) => ({ name, shape: [1, 16], datatype: "INT32", data: i ? B : A })),
    };
    const ensemble = await postJson(port, "/v2/models/ensemble_add_sub/infer", body);
    expect(ensemble.status).toBe(200);
    expect((ensemble.json() as { parameters?: unknown }).parameters).toEqual({
      sequence_id: 0,
      sequence_start: false,
      sequence_end: false,
    });
    expect(ensemble.text).toContain('"parameters":{"sequence_id":0,"sequence_start":false,"sequence_end":false}');
    const simple = await postJson(port, "/v2/models/simple/infer", body);
    expect((simple.json() as { parameters?: unknown }).parameters).toBeUndefined();
  });
});
