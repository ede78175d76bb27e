// examples/python_model_repository: the Python twins of the scripted examples, served as
// documented (docs/guides/python-backend.md), answer as their JS and ONNX counterparts do.
import { fileURLToPath } from "node:url";
import { Code } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
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
let grpcPort = 0;
beforeAll(async () => {
  const running = await startServer({ modelRepositories: [PYTHON_EXAMPLES], pythonExecutable: python });
  expect(running.failedModels).toEqual([]);
  client = running.client;
  grpcPort = running.grpcPort;
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

describe("examples/python_model_repository from an independent gRPC stack (@grpc/grpc-js + Triton's protos)", () => {
  function inferenceClient() {
    const definition = protoLoader.loadSync(["inference/grpc_service.proto"], {
      includeDirs: [fileURLToPath(new URL("../../../proto", import.meta.url))],
      keepCase: true,
      longs: String,
      defaults: true,
    });
    const root = grpc.loadPackageDefinition(definition);
    const Service = (root.inference as grpc.GrpcObject).GRPCInferenceService as grpc.ServiceClientConstructor;
    return new Service(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
      ModelInfer(request: object, callback: (error: Error | null, response: never) => void): void;
      ModelStreamInfer(): unknown;
    };
  }

  it("ModelInfer on add_sub and ModelStreamInfer on repeat_int32", async () => {
    const stub = inferenceClient();
    try {
      const reply = await new Promise<{ raw_output_contents: Buffer[] }>((resolve, reject) =>
        stub.ModelInfer(
          {
            model_name: "add_sub",
            inputs: [
              { name: "INPUT0", datatype: "FP32", shape: ["4"] },
              { name: "INPUT1", datatype: "FP32", shape: ["4"] },
            ],
            raw_input_contents: [Buffer.from(fp32Bytes([1, 2, 3, 4])), Buffer.from(fp32Bytes([1, 1, 1, 1]))],
          },
          (error: Error | null, response: { raw_output_contents: Buffer[] }) =>
            error ? reject(error) : resolve(response),
        ),
      );
      expect(readFp32(new Uint8Array(reply.raw_output_contents[0] ?? []))).toEqual([2, 3, 4, 5]);
      const call = stub.ModelStreamInfer() as grpc.ClientDuplexStream<
        object,
        { infer_response: { raw_output_contents: Buffer[] } }
      >;
      const outs: number[] = [];
      const ended = new Promise<void>((resolve, reject) => {
        call.on("data", (r) =>
          outs.push(readInt32(new Uint8Array(r.infer_response.raw_output_contents[0] ?? []))[0] ?? -1),
        );
        call.on("end", resolve);
        call.on("error", reject);
      });
      call.write({
        model_name: "repeat_int32",
        inputs: [
          { name: "IN", datatype: "INT32", shape: ["2"] },
          { name: "DELAY", datatype: "UINT32", shape: ["2"] },
          { name: "WAIT", datatype: "UINT32", shape: ["1"] },
        ],
        raw_input_contents: [
          Buffer.from(int32Bytes([3, 4])),
          Buffer.from(int32Bytes([0, 0])),
          Buffer.from(int32Bytes([0])),
        ],
      });
      call.end();
      await ended;
      expect(outs).toEqual([3, 4]);
    } finally {
      stub.close();
    }
  });
});
