// Ensembles end to end over the real server: Triton's ensemble_add_sub over simple, and a step
// that fails at run time.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import {
  bytesTensor,
  cleanup,
  copyModel,
  int32Bytes,
  readInt32,
  startServer,
  tempRepository,
} from "./support/harness.js";

afterEach(cleanup);

const simpleInputs = (a: number[], b: number[]) => ({
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
    { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
  ],
  rawInputContents: [int32Bytes(a), int32Bytes(b)],
});

describe("ensembles", () => {
  it("runs Triton's ensemble_add_sub: six steps over simple give the sum and the difference", async () => {
    const { client } = await startServer();
    const a = Array.from({ length: 16 }, (_, i) => i);
    const b = Array.from({ length: 16 }, (_, i) => 3 * i - 7);
    const before = (await client.modelStatistics({ name: "simple" })).modelStats[0]?.inferenceCount ?? 0n;
    const response = await client.modelInfer({ modelName: "ensemble_add_sub", ...simpleInputs(a, b) });
    expect(response.outputs.map((o) => o.name)).toEqual(["OUTPUT0", "OUTPUT1"]);
    expect(readInt32(response.rawOutputContents[0])).toEqual(a.map((x, i) => x + (b[i] ?? 0)));
    expect(readInt32(response.rawOutputContents[1])).toEqual(a.map((x, i) => x - (b[i] ?? 0)));
    const after = (await client.modelStatistics({ name: "simple" })).modelStats[0]?.inferenceCount ?? 0n;
    expect(after - before).toBe(6n);
    const ensemble = (await client.modelStatistics({ name: "ensemble_add_sub" })).modelStats[0];
    expect(ensemble?.inferenceStats?.success?.count).toBe(1n);
    const config = (await client.modelConfig({ name: "ensemble_add_sub" })).config;
    expect(config?.modelTransactionPolicy?.decoupled).toBe(false);
  });

  it("runs the preprocess → mlp_classifier → postprocess pipeline: the class and probability of the MLP", async () => {
    const { client } = await startServer();
    const pixels = Uint8Array.from({ length: 64 }, (_, i) => (i * 37) % 256);
    const direct = await client.modelInfer({
      modelName: "mlp_classifier",
      inputs: [{ name: "INPUT", datatype: "FP32", shape: [1n, 64n] }],
      rawInputContents: [new Uint8Array(Float32Array.from(pixels, (p) => p / 255 - 0.5).buffer)],
    });
    const probabilities = new Float32Array((direct.rawOutputContents[0] as Uint8Array).slice().buffer);
    const best = probabilities.indexOf(Math.max(...probabilities));
    const response = await client.modelInfer({
      modelName: "classifier_pipeline",
      inputs: [{ name: "IMAGE", datatype: "UINT8", shape: [1n, 64n] }],
      rawInputContents: [pixels],
    });
    expect(response.outputs.map((o) => [o.name, o.datatype, o.shape])).toEqual([
      ["CLASS", "INT64", [1n, 1n]],
      ["SCORE", "FP32", [1n, 1n]],
    ]);
    expect(new BigInt64Array((response.rawOutputContents[0] as Uint8Array).slice().buffer)[0]).toBe(BigInt(best));
    expect(new Float32Array((response.rawOutputContents[1] as Uint8Array).slice().buffer)[0]).toBeCloseTo(
      probabilities[best] ?? 0,
      5,
    );
  });

  it("serves many concurrent ensemble requests, each with its own results", async () => {
    const { client } = await startServer();
    const results = await Promise.all(
      Array.from({ length: 24 }, async (_, k) => {
        const a = new Array(16).fill(k);
        const b = new Array(16).fill(2 * k);
        const response = await client.modelInfer({ modelName: "ensemble_add_sub", ...simpleInputs(a, b) });
        return [readInt32(response.rawOutputContents[0])[0], readInt32(response.rawOutputContents[1])[0]];
      }),
    );
    expect(results).toEqual(Array.from({ length: 24 }, (_, k) => [3 * k, 0 - k || 0]));
  });

  it("fails the request when a step fails, naming the step", async () => {
    const repo = tempRepository();
    copyModel("simple_string", repo);
    mkdirSync(join(repo, "strings", "1"), { recursive: true });
    writeFileSync(
      join(repo, "strings", "config.pbtxt"),
      `platform: "ensemble" max_batch_size: 8
       input { name: "A" data_type: TYPE_STRING dims: [ 16 ] }
       input { name: "B" data_type: TYPE_STRING dims: [ 16 ] }
       output { name: "SUM" data_type: TYPE_STRING dims: [ 16 ] }
       ensemble_scheduling { step { model_name: "simple_string" model_version: -1
         input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
         output_map { key: "OUTPUT0" value: "SUM" } } }`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const ok = await client.modelInfer({
      modelName: "strings",
      inputs: [
        { name: "A", datatype: "BYTES", shape: [1n, 16n] },
        { name: "B", datatype: "BYTES", shape: [1n, 16n] },
      ],
      rawInputContents: [bytesTensor(new Array(16).fill("2")), bytesTensor(new Array(16).fill("40"))],
    });
    expect(new TextDecoder().decode(ok.rawOutputContents[0]?.subarray(4, 6))).toBe("42");
    const error = await client
      .modelInfer({
        modelName: "strings",
        inputs: [
          { name: "A", datatype: "BYTES", shape: [1n, 16n] },
          { name: "B", datatype: "BYTES", shape: [1n, 16n] },
        ],
        rawInputContents: [bytesTensor(new Array(16).fill("not a number")), bytesTensor(new Array(16).fill("1"))],
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.Internal);
    expect((error as ConnectError).rawMessage).toMatch(
      /^in ensemble 'strings', step 0 \(model 'simple_string'\) failed: /,
    );
  });
});
