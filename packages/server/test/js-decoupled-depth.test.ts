// A decoupled scripted model's instance takes several batches at once (JsInstance.depth): they
// still run one after another in its thread, in arrival order, as Triton calls `execute`.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ModelInferRequestSchema, ModelStreamInferResponse } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, int32Bytes, pushable, readInt32, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

/** Holds each batch across a few turns of its thread's event loop; answers how many ran at once and the batch's place. */
const OVERLAP = `let active = 0, most = 0, started = 0;
const turn = () => new Promise((resolve) => setImmediate(resolve));
export default class {
  async execute(requests) {
    active++; most = Math.max(most, active);
    const place = started++;
    for (let i = 0; i < 5; i++) await turn();
    active--;
    for (const request of requests) {
      const id = request.input("ID").typed()[0];
      request.responseSender().send(
        { outputs: [{ name: "OUT", datatype: "INT32", shape: [3], data: Int32Array.of(id, place, most) }] },
        { final: true },
      );
    }
  }
}`;

describe("a decoupled scripted model's instance", () => {
  it("runs the batches it holds one at a time, in the order they came", async () => {
    const repo = tempRepository();
    mkdirSync(join(repo, "overlap", "1"), { recursive: true });
    writeFileSync(
      join(repo, "overlap", "config.pbtxt"),
      `name: "overlap"
backend: "js"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "ID" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
`,
    );
    writeFileSync(join(repo, "overlap", "1", "model.mjs"), OVERLAP);
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);
    const input = pushable<MessageInitShape<typeof ModelInferRequestSchema>>();
    for (let id = 0; id < 8; id++)
      input.push({
        modelName: "overlap",
        id: String(id),
        inputs: [{ name: "ID", datatype: "INT32", shape: [1n] }],
        rawInputContents: [int32Bytes([id])],
      });
    input.end();
    const answers: number[][] = [];
    for await (const r of client.modelStreamInfer(input) as AsyncIterable<ModelStreamInferResponse>)
      if (r.inferResponse?.rawOutputContents[0]) answers.push(readInt32(r.inferResponse.rawOutputContents[0]));
    expect(answers).toHaveLength(8);
    // [id, place, most at once]: never two at once, each in its arrival place.
    for (const [id, place, most] of answers) expect([place, most]).toEqual([id, 1]);
  });
});
