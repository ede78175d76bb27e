// A Python model's InferenceResponse(parameters=...) reaches the client, per response, through the
// dynamic batcher (Triton sends them in the ModelInferResponse's and the REST body's parameters).
import { afterEach, describe, expect, it } from "vitest";
import { copyPythonModels, pythonWithNumpy } from "./python-harness.js";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

const int32 = (v: number) => new Uint8Array(Int32Array.of(v).buffer);
const request = (v: number) => ({
  modelName: "response_parameters",
  inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1n, 1n] }],
  rawInputContents: [int32(v)],
});

describe("a Python model's response parameters", () => {
  it("reach gRPC and REST clients, each response its own, batched or not", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["response_parameters"]);
    const { client, failedModels, httpUrl } = await startServer({
      modelRepositories: [repo],
      pythonExecutable: python,
      http: true,
    });
    expect(failedModels).toEqual([]);
    // Four at once: the batcher (20 ms delay) runs them together, and each keeps its own.
    const replies = await Promise.all([1, 2, 3, 4].map((v) => client.modelInfer(request(v))));
    for (const [i, reply] of replies.entries()) {
      const p = reply.parameters;
      expect(p.echo?.parameterChoice).toEqual({ case: "int64Param", value: BigInt(i + 1) });
      expect(p.model?.parameterChoice).toEqual({ case: "stringParam", value: "python" });
      expect(p.even?.parameterChoice).toEqual({ case: "boolParam", value: (i + 1) % 2 === 0 });
      expect(p.batch?.parameterChoice.case).toBe("int64Param");
    }
    expect(replies.some((r) => Number(r.parameters.batch?.parameterChoice.value) > 1)).toBe(true);
    // None given, none sent.
    const plain = await client.modelInfer(request(-1));
    expect(Object.keys(plain.parameters)).toEqual([]);
    const rest = await fetch(`${httpUrl}/v2/models/response_parameters/infer`, {
      method: "POST",
      body: JSON.stringify({ inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 1], data: [6] }] }),
    });
    const body = (await rest.json()) as { parameters?: Record<string, unknown> };
    expect(body.parameters).toEqual({ echo: 6, batch: 1, model: "python", even: true });
  });

  it("are refused by Triton's rules and words: a dict of str keys to bool, int or str", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["response_parameters"]);
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    await expect(client.modelInfer(request(-2))).rejects.toThrow(
      "Expect parameters values to have type bool/int/str, found type <class 'float'>",
    );
  });
});
