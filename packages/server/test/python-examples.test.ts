// examples/python_model_repository: the Python twins of the scripted examples, served as
// documented (docs/guides/python-backend.md), answer as their JS and ONNX counterparts do.
import { fileURLToPath } from "node:url";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonWithNumpy } from "./python-harness.js";
import {
  bytesTensor,
  cleanup,
  expectGrpcError,
  fp32Bytes,
  type InferenceClient,
  int32Bytes,
  pushable,
  range,
  readFp32,
  readInt32,
  startServer,
} from "./support/harness.js";

const PYTHON_EXAMPLES = fileURLToPath(new URL("../../../examples/python_model_repository", import.meta.url));
const python = pythonWithNumpy();

let client: InferenceClient;
beforeAll(async () => {
  const running = await startServer({ modelRepositories: [PYTHON_EXAMPLES], pythonExecutable: python });
  expect(running.failedModels).toEqual([]);
  client = running.client;
});
afterAll(cleanup);

const addSubInputs = [
  { name: "INPUT0", datatype: "FP32", shape: [4n] },
  { name: "INPUT1", datatype: "FP32", shape: [4n] },
];

describe("examples/python_model_repository", () => {
  it("add_sub", async () => {
    const reply = await client.modelInfer({
      modelName: "add_sub",
      inputs: addSubInputs,
      rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([4, 3, 2, 1])],
    });
    expect(readFp32(reply.rawOutputContents[0])).toEqual([5, 5, 5, 5]);
    expect(readFp32(reply.rawOutputContents[1])).toEqual([-3, -1, 1, 3]);
  });

  it("repeat_int32 streams as its JS twin", async () => {
    const input = pushable<Parameters<InferenceClient["modelInfer"]>[0]>();
    input.push({
      modelName: "repeat_int32",
      inputs: [
        { name: "IN", datatype: "INT32", shape: [3n] },
        { name: "DELAY", datatype: "UINT32", shape: [3n] },
        { name: "WAIT", datatype: "UINT32", shape: [1n] },
      ],
      rawInputContents: [int32Bytes([10, 20, 30]), int32Bytes([1, 1, 1]), int32Bytes([0])],
    });
    input.end();
    const outs: number[] = [];
    for await (const r of client.modelStreamInfer(input))
      outs.push(readInt32(r.inferResponse?.rawOutputContents[0])[0] ?? -1);
    expect(outs).toEqual([10, 20, 30]);
  });

  it("bls_sync calls add_sub, and fails with the callee's message for an unknown model", async () => {
    const call = (model: string) =>
      client.modelInfer({
        modelName: "bls_sync",
        inputs: [{ name: "MODEL_NAME", datatype: "BYTES", shape: [1n] }, ...addSubInputs],
        rawInputContents: [bytesTensor([model]), fp32Bytes([1, 1, 1, 1]), fp32Bytes([2, 2, 2, 2])],
      });
    expect(readFp32((await call("add_sub")).rawOutputContents[0])).toEqual([3, 3, 3, 3]);
    await expectGrpcError(call("nope"), Code.Internal, /nope/);
  });

  it("bls_simple calls the ONNX simple", async () => {
    const reply = await client.modelInfer({
      modelName: "bls_simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [16n] },
        { name: "INPUT1", datatype: "INT32", shape: [16n] },
      ],
      rawInputContents: [int32Bytes(range(16)), int32Bytes(range(16).map(() => 2))],
    });
    expect(readInt32(reply.rawOutputContents[0])).toEqual(range(16).map((i) => i + 2));
    expect(readInt32(reply.rawOutputContents[1])).toEqual(range(16).map((i) => i - 2));
  });

  it("preprocess scales pixels with numpy, batched", async () => {
    const replies = await Promise.all(
      range(8).map((n) =>
        client.modelInfer({
          modelName: "preprocess",
          inputs: [{ name: "IMAGE", datatype: "UINT8", shape: [1n, 64n] }],
          rawInputContents: [new Uint8Array(64).fill(n * 30)],
        }),
      ),
    );
    for (const [n, reply] of replies.entries()) {
      const expected = Math.fround(Math.fround((n * 30) / 255) - 0.5);
      expect(readFp32(reply.rawOutputContents[0])).toEqual(Array(64).fill(expected));
    }
  });
});
