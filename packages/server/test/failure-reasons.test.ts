// Every failed request is counted once, under Triton's reason (core/request-pipeline.ts), whether
// it came as a unary call or on a stream: REJECTED for a full queue, BACKEND for the model's own
// error, OTHER for a request the core refuses, CANCELED for a cancelled one.
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ModelInferRequestSchema, ModelStreamInferResponse } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, int32Bytes, pushable, startServer, tempRepository, waitFor } from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

/**
 * Holds each request until the gate file exists (after writing `running` beside it), answers an
 * ID of -1 with an error response of its own, and echoes any other ID.
 */
const GATE = `import { existsSync, writeFileSync } from "node:fs";
const wait = () => new Promise((resolve) => setTimeout(resolve, 5));
export default class {
  dir = new URL("..", import.meta.url).pathname;
  async execute(requests) {
    for (const request of requests) {
      const id = request.input("ID").typed()[0];
      const sender = request.responseSender();
      if (id === -1) { sender.send({ error: "the model refused -1" }, { final: true }); continue; }
      writeFileSync(this.dir + "running", "");
      while (!existsSync(this.dir + "gate")) await wait();
      sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1, 1], data: Int32Array.of(id) }] }, { final: true });
    }
  }
}`;

type Init = MessageInitShape<typeof ModelInferRequestSchema>;
const request = (id: number, datatype = "INT32"): Init => ({
  modelName: "gate",
  id: String(id),
  inputs: [{ name: "ID", datatype, shape: [1n, 1n] }],
  rawInputContents: [int32Bytes([id])],
});

describe("failure reasons", () => {
  it("count each failure once, under Triton's reason, on a stream", async () => {
    const repo = tempRepository();
    const model = join(repo, "gate");
    mkdirSync(join(model, "1"), { recursive: true });
    writeFileSync(
      join(model, "config.pbtxt"),
      `name: "gate"
backend: "js"
max_batch_size: 1
model_transaction_policy { decoupled: true }
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
input [ { name: "ID" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
`,
    );
    writeFileSync(join(model, "1", "model.mjs"), GATE);
    const { client, metricsUrl, failedModels } = await startServer({ modelRepositories: [repo], metrics: true });
    expect(failedModels).toEqual([]);

    const input = pushable<Init>();
    const responses: ModelStreamInferResponse[] = [];
    const reading = (async () => {
      for await (const r of client.modelStreamInfer(input) as AsyncIterable<ModelStreamInferResponse>)
        responses.push(r);
    })();
    // One request runs (held at the gate), one waits in the queue, the next finds it full.
    input.push(request(1));
    await waitFor(() => existsSync(join(model, "running")), { what: "the first request to run" });
    input.push(request(2));
    input.push(request(3));
    await waitFor(() => responses.some((r) => r.errorMessage.includes("Exceeds maximum queue size")), {
      what: "the third request to be rejected",
    });
    // A request the core refuses (a wrong datatype).
    input.push(request(4, "FP32"));
    await waitFor(() => responses.some((r) => r.inferResponse?.id === "4"), { what: "the refusal" });
    writeFileSync(join(model, "gate"), "");
    await waitFor(() => responses.filter((r) => r.errorMessage === "").length === 2, { what: "two answers" });
    // The model's own error.
    input.push(request(-1));
    await waitFor(() => responses.some((r) => r.inferResponse?.id === "-1"), { what: "the model's error" });
    input.end();
    await reading;
    expect(responses.filter((r) => r.errorMessage === "").map((r) => r.inferResponse?.id)).toEqual(["1", "2"]);

    const metrics = await scrape(metricsUrl as string);
    const failures = (reason: string) =>
      sampleValue(metrics, "nv_inference_request_failure", { model: "gate", version: "1", reason });
    expect({
      REJECTED: failures("REJECTED"),
      BACKEND: failures("BACKEND"),
      OTHER: failures("OTHER"),
      CANCELED: failures("CANCELED"),
    }).toEqual({ REJECTED: 1, BACKEND: 1, OTHER: 1, CANCELED: 0 });
    expect(sampleValue(metrics, "nv_inference_request_success", { model: "gate", version: "1" })).toBe(2);
  });
});
