// The outputs of one batch share a buffer: handing one request's output to a worker thread must
// not take its neighbours' data with it. A scripted model calls a dynamically batched ONNX model
// twice at once; both calls land in one batch, and both results reach the script intact.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, copyModel, fp32Bytes, readFp32, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

const PAIR = `name: "pair"
backend: "js"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 1, 64 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 1, 64 ] } ]
output [ { name: "OUT_A" data_type: TYPE_FP32 dims: [ 1, 10 ] }, { name: "OUT_B" data_type: TYPE_FP32 dims: [ 1, 10 ] } ]
`;

const PAIR_SOURCE = `export default class {
  execute(requests, ctx) {
    return Promise.all(requests.map(async (r) => {
      const [a, b] = await Promise.all(["A", "B"].map((name) =>
        ctx.infer({ model: "mlp_classifier", inputs: [{ ...r.input(name), name: "INPUT" }] })));
      const out = (reply, name) => ({ name, datatype: "FP32", shape: [1, 10], data: reply.output("PROBABILITIES").typed() });
      return { outputs: [out(a, "OUT_A"), out(b, "OUT_B")] };
    }));
  }
}`;

describe("batched outputs", () => {
  it("reach two BLS calls served by one batch intact", async () => {
    const repo = tempRepository();
    const mlp = copyModel("mlp_classifier", repo);
    // A long delay with a preferred size of 2: the two calls always share one batch.
    const config = join(mlp, "config.pbtxt");
    writeFileSync(
      config,
      readFileSync(config, "utf8").replace(
        /dynamic_batching \{[^}]*\}/,
        "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 5000000 }",
      ),
    );
    mkdirSync(join(repo, "pair", "1"), { recursive: true });
    writeFileSync(join(repo, "pair", "config.pbtxt"), PAIR);
    writeFileSync(join(repo, "pair", "1", "model.mjs"), PAIR_SOURCE);
    const { client, failedModels, server } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);

    const a = Array.from({ length: 64 }, (_, i) => Math.sin(i));
    const b = Array.from({ length: 64 }, (_, i) => Math.cos(3 * i));
    const reply = await client.modelInfer({
      modelName: "pair",
      inputs: [
        { name: "A", datatype: "FP32", shape: [1n, 64n] },
        { name: "B", datatype: "FP32", shape: [1n, 64n] },
      ],
      rawInputContents: [fp32Bytes(a), fp32Bytes(b)],
    });
    const stats = server.core.models.resolve("mlp_classifier", "").stats;
    expect([...stats.batches.keys()]).toEqual([2]);

    // The same rows, one request each (a pair of them again, so they batch the same way).
    const direct = await Promise.all(
      [a, b].map((values) =>
        client.modelInfer({
          modelName: "mlp_classifier",
          inputs: [{ name: "INPUT", datatype: "FP32", shape: [1n, 64n] }],
          rawInputContents: [fp32Bytes(values)],
        }),
      ),
    );
    const expected = direct.map((r) => readFp32(r.rawOutputContents[0]));
    expect(expected[0]).toHaveLength(10);
    expect(readFp32(reply.rawOutputContents[0])).toEqual(expected[0]);
    expect(readFp32(reply.rawOutputContents[1])).toEqual(expected[1]);
  });
});
