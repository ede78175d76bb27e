// `async def execute` as Triton's stub runs it (issue 48 item 5): a decoupled model's executions
// overlap on one event loop that keeps running between calls, so tasks they start go on after
// execute returns. Overlap is shown by a barrier (each execution waits for all to start), not by time.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ModelInferRequestSchema, ModelStreamInferResponse } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { copyPythonModels, pythonWithNumpy } from "./python-harness.js";
import { cleanup, type InferenceClient, pushable, readInt32, startServer, tempRepository } from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

type Init = MessageInitShape<typeof ModelInferRequestSchema>;

const request = (n: number, id: string): Init => ({
  modelName: "async_decoupled",
  id,
  // The flag-only final response reaches the client too (Triton sends it only when asked).
  parameters: { triton_enable_empty_final_response: { parameterChoice: { case: "boolParam", value: true } } },
  inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
  rawInputContents: [new Uint8Array(Int32Array.of(n).buffer)],
});

/** Send `requests` on one stream and collect every response until each request has its final one. */
async function streamAll(client: InferenceClient, requests: Init[]): Promise<ModelStreamInferResponse[]> {
  const input = pushable<Init>();
  for (const r of requests) input.push(r);
  const responses: ModelStreamInferResponse[] = [];
  const open = new Set(requests.map((r) => r.id));
  for await (const r of client.modelStreamInfer(input)) {
    responses.push(r);
    const final = r.inferResponse?.parameters.triton_final_response?.parameterChoice.value;
    if (final === true || r.errorMessage !== "") open.delete(r.inferResponse?.id ?? "");
    if (open.size === 0) input.end();
  }
  return responses;
}

async function asyncServer() {
  const repo = tempRepository();
  copyPythonModels(repo, ["async_decoupled"]);
  const running = await startServer({ modelRepositories: [repo], pythonExecutable: python });
  expect(running.failedModels).toEqual([]);
  return running;
}

describe("a decoupled model's async execute", () => {
  it("overlaps executions: four requests to one instance each wait until all four have started", async () => {
    const { client } = await asyncServer();
    const ids = ["a", "b", "c", "d"];
    const responses = await streamAll(
      client,
      ids.map((id) => request(4, id)),
    );
    expect(responses.map((r) => r.errorMessage)).toEqual(["", "", "", ""]);
    expect(responses.map((r) => r.inferResponse?.id).sort()).toEqual(ids);
    for (const r of responses) expect(readInt32(r.inferResponse?.rawOutputContents[0])).toEqual([4]);
  }, 60_000);

  it("runs the tasks an execute started after it returned, on the same loop", async () => {
    const { client } = await asyncServer();
    const responses = await streamAll(client, [request(0, "t")]);
    const values = responses.filter((r) => (r.inferResponse?.outputs.length ?? 0) > 0);
    expect(values.map((r) => readInt32(r.inferResponse?.rawOutputContents[0])[0])).toEqual([0, 1, 2]);
    expect(responses.at(-1)?.inferResponse?.parameters.triton_final_response?.parameterChoice.value).toBe(true);
  });

  it("fails the requests of an execute that raises, or that ends with no sender left to finish them", async () => {
    const { client } = await asyncServer();
    const [raised] = await streamAll(client, [request(-1, "x")]);
    expect(raised?.errorMessage).toContain("ValueError: asked to fail");
    const [dropped] = await streamAll(client, [request(-2, "y")]);
    expect(dropped?.errorMessage).toContain(
      "the response sender of the request was dropped before it sent the final flag",
    );
    // The loop and the instance go on.
    const [after] = await streamAll(client, [request(1, "z")]);
    expect(after?.errorMessage).toBe("");
  });
});
