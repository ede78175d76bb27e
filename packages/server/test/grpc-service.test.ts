// inference.GRPCInferenceService end to end: every RPC through a Connect client (gRPC protocol)
// against createServer over the example repository, with Triton's answers and messages
// (PROTOCOL.md §2, §4.6, §5, §8). Also gRPC-Web and Connect on the same port, and gRPC health.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import {
  GRPCInferenceService,
  Health,
  HealthCheckResponse_ServingStatus,
  InferParameterSchema,
  type ModelInferRequestSchema,
  type ModelInferResponse,
  ModelInstanceGroup_Kind,
  type ModelStreamInferResponse,
} from "@galley/proto";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import {
  bytesTensor,
  cleanup,
  EXAMPLES,
  expectGrpcError,
  fp32Bytes,
  grpcFailure,
  int8Bytes,
  int32Bytes,
  pushable,
  type Running,
  range,
  readBytesTensor,
  readFp32,
  readInt8,
  readInt32,
  recordingLog,
  simpleRequest,
  startServer,
  tempRepository,
} from "./support/harness.js";

type InferInit = MessageInitShape<typeof ModelInferRequestSchema>;

afterEach(cleanup);

const A = range(16);
const B = range(16).map(() => 1);
const SUM = A.map((v, i) => v + (B[i] ?? 0));
const DIFF = A.map((v, i) => v - (B[i] ?? 0));

/** An output's raw contents, found by name (raw_output_contents is parallel to outputs). */
function rawOutput(response: ModelInferResponse | undefined, name: string): Uint8Array {
  if (!response) throw new Error("no infer_response");
  const at = response.outputs.findIndex((o) => o.name === name);
  const raw = response.rawOutputContents[at];
  if (at === -1 || !raw) throw new Error(`no output '${name}' in ${response.outputs.map((o) => o.name).join(",")}`);
  return raw;
}

function outputShape(response: ModelInferResponse, name: string): number[] {
  return (response.outputs.find((o) => o.name === name)?.shape ?? []).map(Number);
}

const MISSING_INPUT1 =
  "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).";

describe("health and metadata", () => {
  it("answers ServerLive, ServerReady and ServerMetadata with Triton's extension names in Triton's order", async () => {
    const { client } = await startServer();
    expect((await client.serverLive({})).live).toBe(true);
    expect((await client.serverReady({})).ready).toBe(true);
    const metadata = await client.serverMetadata({});
    expect(metadata.name).toBe("triton");
    expect(metadata.version).toMatch(/^\d+\.\d+\.\d+/);
    // Triton's list, in the order core/src/server.cc pushes them (§1.2): Galley implements each.
    expect(metadata.extensions).toEqual([
      "classification",
      "sequence",
      "model_repository",
      "model_repository(unload_dependents)",
      "schedule_policy",
      "model_configuration",
      "system_shared_memory",
      "cuda_shared_memory",
      "binary_tensor_data",
      "parameters",
      "statistics",
      "trace",
      "logging",
    ]);
  });

  it("answers ModelReady: ready, unknown model NOT_FOUND, bad version INVALID_ARGUMENT, unknown version not ready", async () => {
    const { client } = await startServer();
    expect((await client.modelReady({ name: "simple" })).ready).toBe(true);
    expect((await client.modelReady({ name: "simple", version: "1" })).ready).toBe(true);
    await expectGrpcError(
      client.modelReady({ name: "x" }),
      Code.NotFound,
      "Request for unknown model: 'x' is not found",
    );
    await expectGrpcError(
      client.modelReady({ name: "simple", version: "abc" }),
      Code.InvalidArgument,
      /^failed to get model version from specified version string 'abc'.*version should be an integral value > 0$/,
    );
    // PROTOCOL.md §2.1: only an unknown model is an error; a version that is not there is not ready.
    expect((await client.modelReady({ name: "simple", version: "7" })).ready).toBe(false);
  });

  it("answers ModelMetadata with the platform, READY versions and -1 batch dimensions", async () => {
    const { client } = await startServer();
    const simple = await client.modelMetadata({ name: "simple" });
    expect(simple.name).toBe("simple");
    expect(simple.versions).toEqual(["1"]);
    expect(simple.platform).toBe("onnxruntime_onnx");
    const tensors = (list: typeof simple.inputs) =>
      list.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(Number) }));
    expect(tensors(simple.inputs)).toEqual([
      { name: "INPUT0", datatype: "INT32", shape: [-1, 16] },
      { name: "INPUT1", datatype: "INT32", shape: [-1, 16] },
    ]);
    expect(tensors(simple.outputs)).toEqual([
      { name: "OUTPUT0", datatype: "INT32", shape: [-1, 16] },
      { name: "OUTPUT1", datatype: "INT32", shape: [-1, 16] },
    ]);
    const strings = await client.modelMetadata({ name: "simple_string", version: "1" });
    expect(strings.versions).toEqual(["1"]);
    expect(tensors(strings.inputs)[0]).toEqual({ name: "INPUT0", datatype: "BYTES", shape: [-1, 16] });
    const mlp = await client.modelMetadata({ name: "mlp_classifier" });
    expect(tensors(mlp.inputs)).toEqual([{ name: "INPUT", datatype: "FP32", shape: [-1, 64] }]);
    expect(tensors(mlp.outputs)).toEqual([{ name: "PROBABILITIES", datatype: "FP32", shape: [-1, 10] }]);
    await expectGrpcError(
      client.modelMetadata({ name: "x" }),
      Code.NotFound,
      "Request for unknown model: 'x' is not found",
    );
  });

  it("answers ModelConfig with the final config: autofilled backend, normalized instance groups", async () => {
    const { client } = await startServer();
    const simple = (await client.modelConfig({ name: "simple" })).config;
    expect(simple?.name).toBe("simple");
    expect(simple?.platform).toBe("onnxruntime_onnx");
    expect(simple?.backend).toBe("onnxruntime");
    expect(simple?.maxBatchSize).toBe(8);
    expect(simple?.defaultModelFilename).toBe("model.onnx");
    expect(simple?.versionPolicy?.policyChoice).toMatchObject({ case: "latest", value: { numVersions: 1 } });
    // No instance_group: one group named after the model, KIND_CPU, count 2 for onnxruntime (§4.2).
    expect(simple?.instanceGroup.map((g) => ({ name: g.name, kind: g.kind, count: g.count }))).toEqual([
      { name: "simple", kind: ModelInstanceGroup_Kind.CPU, count: 2 },
    ]);
    expect(simple?.input.map((i) => [i.name, i.dims.map(Number)])).toEqual([
      ["INPUT0", [16]],
      ["INPUT1", [16]],
    ]);
    const mlp = (await client.modelConfig({ name: "mlp_classifier", version: "1" })).config;
    expect(mlp?.backend).toBe("onnxruntime");
    // A group without a name gets <model>_<index>.
    expect(mlp?.instanceGroup.map((g) => ({ name: g.name, kind: g.kind, count: g.count }))).toEqual([
      { name: "mlp_classifier_0", kind: ModelInstanceGroup_Kind.CPU, count: 1 },
    ]);
    expect(mlp?.output[0]?.labelFilename).toBe("labels.txt");
    // dynamic_batching without preferred_batch_size gets [max_batch_size] (§4.2).
    expect(mlp?.schedulingChoice.case).toBe("dynamicBatching");
    if (mlp?.schedulingChoice.case === "dynamicBatching") {
      expect(mlp.schedulingChoice.value.preferredBatchSize).toEqual([64]);
      expect(mlp.schedulingChoice.value.maxQueueDelayMicroseconds).toBe(100n);
    }
    await expectGrpcError(
      client.modelConfig({ name: "x" }),
      Code.NotFound,
      "Request for unknown model: 'x' is not found",
    );
  });
});

describe("ModelInfer on simple", () => {
  it("adds and subtracts with raw_input_contents, echoing the id, always answering raw_output_contents", async () => {
    const { client } = await startServer();
    const response = await client.modelInfer(simpleRequest(A, B, { id: "req-1" }));
    expect(response.modelName).toBe("simple");
    expect(response.modelVersion).toBe("1");
    expect(response.id).toBe("req-1");
    expect(response.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)])).toEqual([
      ["OUTPUT0", "INT32", [1, 16]],
      ["OUTPUT1", "INT32", [1, 16]],
    ]);
    expect(response.outputs.every((o) => o.contents === undefined)).toBe(true);
    expect(response.rawOutputContents).toHaveLength(2);
    expect(readInt32(rawOutput(response, "OUTPUT0"))).toEqual(SUM);
    expect(readInt32(rawOutput(response, "OUTPUT1"))).toEqual(DIFF);
  });

  it("accepts typed int_contents, and a batch of 8", async () => {
    const { client } = await startServer();
    const typed = await client.modelInfer({
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1n, 16n], contents: { intContents: A } },
        { name: "INPUT1", datatype: "INT32", shape: [1n, 16n], contents: { intContents: B } },
      ],
    });
    expect(readInt32(rawOutput(typed, "OUTPUT0"))).toEqual(SUM);
    expect(readInt32(rawOutput(typed, "OUTPUT1"))).toEqual(DIFF);

    const a8 = range(128, -64);
    const b8 = range(128).map((i) => i * 3);
    const batch = await client.modelInfer(simpleRequest(a8, b8));
    expect(outputShape(batch, "OUTPUT0")).toEqual([8, 16]);
    expect(readInt32(rawOutput(batch, "OUTPUT0"))).toEqual(a8.map((v, i) => v + (b8[i] ?? 0)));
    expect(readInt32(rawOutput(batch, "OUTPUT1"))).toEqual(a8.map((v, i) => v - (b8[i] ?? 0)));
  });

  it("answers Triton's messages for contents mixed with raw, a wrong typed field and missing data", async () => {
    const { client } = await startServer();
    await expectGrpcError(
      client.modelInfer({
        modelName: "simple",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1n, 16n], contents: { intContents: A } },
          { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
        ],
        rawInputContents: [int32Bytes(A), int32Bytes(B)],
      }),
      Code.InvalidArgument,
      "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    );
    await expectGrpcError(
      client.modelInfer({
        modelName: "simple",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1n, 16n], contents: { fp32Contents: A } },
          { name: "INPUT1", datatype: "INT32", shape: [1n, 16n], contents: { intContents: B } },
        ],
      }),
      Code.InvalidArgument,
      "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype 'INT32'",
    );
    await expectGrpcError(
      client.modelInfer({
        modelName: "simple",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
          { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
        ],
      }),
      Code.InvalidArgument,
      "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    );
  });

  it("answers Triton's request-validation messages: shape, batch size, datatype, unknown and missing inputs", async () => {
    const { client } = await startServer();
    const request = (inputs: { name: string; datatype: string; shape: bigint[]; data: Uint8Array }[], id = "") => ({
      modelName: "simple",
      id,
      inputs: inputs.map(({ name, datatype, shape }) => ({ name, datatype, shape })),
      rawInputContents: inputs.map((i) => i.data),
    });
    const in0 = { name: "INPUT0", datatype: "INT32", shape: [1n, 16n], data: int32Bytes(A) };
    const in1 = { name: "INPUT1", datatype: "INT32", shape: [1n, 16n], data: int32Bytes(B) };

    const noBatch = await expectGrpcError(
      client.modelInfer(
        request([
          { ...in0, shape: [16n] },
          { ...in1, shape: [16n] },
        ]),
      ),
      Code.InvalidArgument,
    );
    expect(noBatch.rawMessage).toMatch(
      /^\[request id: <id_unknown>\] unexpected shape for input 'INPUT0' for model 'simple'\. Expected \[-1,16\], got \[16\]\. /,
    );
    expect(noBatch.rawMessage).toContain(
      "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape.",
    );
    const halfRow = await expectGrpcError(
      client.modelInfer(
        request([
          { ...in0, shape: [1n, 8n], data: int32Bytes(range(8)) },
          { ...in1, shape: [1n, 8n], data: int32Bytes(range(8)) },
        ]),
      ),
      Code.InvalidArgument,
    );
    expect(halfRow.rawMessage).toMatch(
      /^\[request id: <id_unknown>\] unexpected shape for input 'INPUT0' for model 'simple'\. Expected \[-1,16\], got \[1,8\]\./,
    );
    await expectGrpcError(
      client.modelInfer(simpleRequest(range(16 * 9), range(16 * 9), { id: "big" })),
      Code.InvalidArgument,
      "[request id: big] inference request batch-size must be <= 8 for 'simple'",
    );
    await expectGrpcError(
      client.modelInfer(request([{ ...in0, datatype: "FP32", data: fp32Bytes(A) }, in1])),
      Code.InvalidArgument,
      "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    );
    await expectGrpcError(
      client.modelInfer(request([in0, in1, { ...in1, name: "INPUT2" }], "extra")),
      Code.InvalidArgument,
      "[request id: extra] unexpected inference input 'INPUT2' for model 'simple'",
    );
    await expectGrpcError(client.modelInfer(request([in0])), Code.InvalidArgument, MISSING_INPUT1);
    await expectGrpcError(
      client.modelInfer(request([in0, { ...in1, data: int32Bytes(range(15)) }])),
      Code.InvalidArgument,
      "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60",
    );
    await expectGrpcError(
      client.modelInfer({ ...simpleRequest(A, B), outputs: [{ name: "OUTPUT9" }] }),
      Code.InvalidArgument,
      "[request id: <id_unknown>] unexpected inference output 'OUTPUT9' for model 'simple'",
    );
    await expectGrpcError(
      client.modelInfer({ ...simpleRequest(A, B), modelName: "x" }),
      Code.NotFound,
      "Request for unknown model: 'x' is not found",
    );
    await expectGrpcError(
      client.modelInfer({ ...simpleRequest(A, B), modelVersion: "2" }),
      Code.NotFound,
      "Request for unknown model: 'simple' version 2 is not found",
    );
  });

  it("returns only the requested outputs, in the order requested, with raw contents parallel to outputs", async () => {
    const { client } = await startServer();
    const one = await client.modelInfer({ ...simpleRequest(A, B), outputs: [{ name: "OUTPUT1" }] });
    expect(one.outputs.map((o) => o.name)).toEqual(["OUTPUT1"]);
    expect(one.rawOutputContents).toHaveLength(1);
    expect(readInt32(one.rawOutputContents[0])).toEqual(DIFF);

    const swapped = await client.modelInfer({
      ...simpleRequest(A, B),
      outputs: [{ name: "OUTPUT1" }, { name: "OUTPUT0" }],
    });
    expect(swapped.outputs.map((o) => o.name)).toEqual(["OUTPUT1", "OUTPUT0"]);
    expect(readInt32(swapped.rawOutputContents[0])).toEqual(DIFF);
    expect(readInt32(swapped.rawOutputContents[1])).toEqual(SUM);
  });
});

describe("ModelInfer on the other example models", () => {
  it("wraps simple_int8 results, with int_contents and with raw contents", async () => {
    const { client } = await startServer();
    const a = [100, -100, 127, -128, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    const b = [100, 100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
    const wrap = (v: number) => ((((v + 128) % 256) + 256) % 256) - 128;
    const sum = a.map((v, i) => wrap(v + (b[i] ?? 0)));
    const diff = a.map((v, i) => wrap(v - (b[i] ?? 0)));
    expect(sum.slice(0, 4)).toEqual([-56, 0, -128, -127]);

    const typed = await client.modelInfer({
      modelName: "simple_int8",
      inputs: [
        { name: "INPUT0", datatype: "INT8", shape: [1n, 16n], contents: { intContents: a } },
        { name: "INPUT1", datatype: "INT8", shape: [1n, 16n], contents: { intContents: b } },
      ],
    });
    expect(typed.outputs.map((o) => o.datatype)).toEqual(["INT8", "INT8"]);
    expect(readInt8(rawOutput(typed, "OUTPUT0"))).toEqual(sum);
    expect(readInt8(rawOutput(typed, "OUTPUT1"))).toEqual(diff);

    const raw = await client.modelInfer({
      modelName: "simple_int8",
      inputs: [
        { name: "INPUT0", datatype: "INT8", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "INT8", shape: [1n, 16n] },
      ],
      rawInputContents: [int8Bytes(a), int8Bytes(b)],
    });
    expect(readInt8(rawOutput(raw, "OUTPUT0"))).toEqual(sum);
    expect(readInt8(rawOutput(raw, "OUTPUT1"))).toEqual(diff);
  });

  it("adds decimal strings on simple_string, with bytes_contents and with raw contents", async () => {
    const { client } = await startServer();
    const a = A.map(String);
    const b = B.map(String);
    const typed = await client.modelInfer({
      modelName: "simple_string",
      inputs: [
        {
          name: "INPUT0",
          datatype: "BYTES",
          shape: [1n, 16n],
          contents: { bytesContents: a.map((s) => new TextEncoder().encode(s)) },
        },
        {
          name: "INPUT1",
          datatype: "BYTES",
          shape: [1n, 16n],
          contents: { bytesContents: b.map((s) => new TextEncoder().encode(s)) },
        },
      ],
    });
    expect(typed.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)])).toEqual([
      ["OUTPUT0", "BYTES", [1, 16]],
      ["OUTPUT1", "BYTES", [1, 16]],
    ]);
    expect(readBytesTensor(rawOutput(typed, "OUTPUT0"))).toEqual(SUM.map(String));
    expect(readBytesTensor(rawOutput(typed, "OUTPUT1"))).toEqual(DIFF.map(String));

    const raw = await client.modelInfer({
      modelName: "simple_string",
      inputs: [
        { name: "INPUT0", datatype: "BYTES", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "BYTES", shape: [1n, 16n] },
      ],
      rawInputContents: [bytesTensor(a), bytesTensor(b)],
    });
    expect(readBytesTensor(rawOutput(raw, "OUTPUT0"))).toEqual(SUM.map(String));
    expect(readBytesTensor(rawOutput(raw, "OUTPUT1"))).toEqual(DIFF.map(String));
  });

  it("returns simple_identity's strings unchanged", async () => {
    const { client } = await startServer();
    const words = ["hello", "", "Grüße ✓", "a longer string with spaces"];
    const response = await client.modelInfer({
      modelName: "simple_identity",
      inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1n, BigInt(words.length)] }],
      rawInputContents: [bytesTensor(words)],
    });
    expect(outputShape(response, "OUTPUT0")).toEqual([1, words.length]);
    expect(readBytesTensor(rawOutput(response, "OUTPUT0"))).toEqual(words);
  });

  it("classifies mlp_classifier's output (int64_param 3) as BYTES 'value:index:label' with 6 decimals", async () => {
    const { client } = await startServer();
    const labels = readFileSync(join(EXAMPLES, "mlp_classifier", "labels.txt"), "utf8")
      .trim()
      .split("\n");
    const rows = [range(64).map((i) => Math.sin(i * 0.7)), range(64).map((i) => Math.cos(i * 1.3) * 2)];
    const input = (batch: number[][]) => ({
      modelName: "mlp_classifier",
      inputs: [{ name: "INPUT", datatype: "FP32", shape: [BigInt(batch.length), 64n] }],
      rawInputContents: [fp32Bytes(batch.flat())],
    });
    const plain = await client.modelInfer(input(rows));
    expect(outputShape(plain, "PROBABILITIES")).toEqual([2, 10]);
    const probabilities = readFp32(rawOutput(plain, "PROBABILITIES"));
    expect(probabilities.slice(0, 10).reduce((a, b) => a + b, 0)).toBeCloseTo(1, 4);
    const top3 = (row: number) => {
      const values = probabilities.slice(row * 10, row * 10 + 10);
      return range(10)
        .sort((x, y) => (values[y] ?? 0) - (values[x] ?? 0) || x - y)
        .slice(0, 3)
        .map((i) => `${(values[i] ?? 0).toFixed(6)}:${i}:${labels[i]}`);
    };

    const classification = create(InferParameterSchema, { parameterChoice: { case: "int64Param", value: 3n } });
    const classified = await client.modelInfer({
      ...input(rows),
      outputs: [{ name: "PROBABILITIES", parameters: { classification } }],
    });
    expect(classified.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)])).toEqual([
      ["PROBABILITIES", "BYTES", [2, 3]],
    ]);
    const strings = readBytesTensor(rawOutput(classified, "PROBABILITIES"));
    expect(strings).toEqual([...top3(0), ...top3(1)]);
    for (const s of strings) expect(s).toMatch(/^\d+\.\d{6}:\d:[a-z]+$/);
  });
});

describe("ModelStreamInfer", () => {
  it("serves several requests on one stream, answering errors as error_message without ending the stream", async () => {
    const { client } = await startServer();
    const requests = pushable<InferInit>();
    const responses = client.modelStreamInfer(requests)[Symbol.asyncIterator]();
    const next = async (): Promise<ModelStreamInferResponse> => {
      const result = await responses.next();
      if (result.done) throw new Error("the stream ended early");
      return result.value;
    };
    onTestFinished(() => requests.end());

    requests.push(simpleRequest(A, B, { id: "ok-1" }));
    const first = await next();
    expect(first.errorMessage).toBe("");
    expect(first.inferResponse?.id).toBe("ok-1");
    expect(readInt32(rawOutput(first.inferResponse, "OUTPUT0"))).toEqual(SUM);

    requests.push({ ...simpleRequest(A, B), modelName: "nope", id: "bad-1" });
    expect((await next()).errorMessage).toBe("Request for unknown model: 'nope' is not found");

    const only0 = simpleRequest(A, B, { id: "bad-2" });
    requests.push({ ...only0, inputs: only0.inputs.slice(0, 1), rawInputContents: only0.rawInputContents.slice(0, 1) });
    expect((await next()).errorMessage).toBe(MISSING_INPUT1.replace("<id_unknown>", "bad-2"));

    requests.push({
      modelName: "simple_string",
      id: "ok-2",
      inputs: [
        { name: "INPUT0", datatype: "BYTES", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "BYTES", shape: [1n, 16n] },
      ],
      rawInputContents: [bytesTensor(A.map(String)), bytesTensor(B.map(String))],
    });
    const second = await next();
    expect(second.errorMessage).toBe("");
    expect(second.inferResponse?.id).toBe("ok-2");
    expect(readBytesTensor(rawOutput(second.inferResponse, "OUTPUT1"))).toEqual(DIFF.map(String));

    // Three at once: every one is answered, whatever the order.
    requests.push(simpleRequest(B, A, { id: "ok-3" }));
    requests.push(simpleRequest(range(16 * 9), range(16 * 9), { id: "bad-3" }));
    requests.push(simpleRequest(A, A, { id: "ok-4" }));
    const burst = [await next(), await next(), await next()];
    const ok = new Map(burst.filter((r) => r.errorMessage === "").map((r) => [r.inferResponse?.id, r.inferResponse]));
    expect([...ok.keys()].sort()).toEqual(["ok-3", "ok-4"]);
    expect(readInt32(rawOutput(ok.get("ok-3"), "OUTPUT1"))).toEqual(B.map((v, i) => v - (A[i] ?? 0)));
    expect(readInt32(rawOutput(ok.get("ok-4"), "OUTPUT0"))).toEqual(A.map((v) => 2 * v));
    expect(burst.filter((r) => r.errorMessage !== "").map((r) => r.errorMessage)).toEqual([
      "[request id: bad-3] inference request batch-size must be <= 8 for 'simple'",
    ]);

    requests.end();
    expect((await responses.next()).done).toBe(true);
  });
});

describe("ModelStatistics", () => {
  it("counts the inferences made: success, fail, inference and execution counts, batch_stats", async () => {
    const { client } = await startServer({ controlMode: "explicit", loadModels: ["simple", "simple_int8"] });
    const before = Date.now();
    for (let i = 0; i < 3; i++) await client.modelInfer(simpleRequest(A, B));
    await client.modelInfer(simpleRequest([...A, ...A], [...B, ...B]));
    const only0 = simpleRequest(A, B);
    await expectGrpcError(
      client.modelInfer({ ...only0, inputs: only0.inputs.slice(0, 1), rawInputContents: [int32Bytes(A)] }),
      Code.InvalidArgument,
    );
    const after = Date.now();

    const response = await client.modelStatistics({ name: "simple" });
    expect(response.modelStats).toHaveLength(1);
    const stats = response.modelStats[0];
    expect(stats?.name).toBe("simple");
    expect(stats?.version).toBe("1");
    expect(Number(stats?.lastInference)).toBeGreaterThanOrEqual(before);
    expect(Number(stats?.lastInference)).toBeLessThanOrEqual(after);
    expect(stats?.inferenceCount).toBe(5n);
    expect(stats?.executionCount).toBe(4n);
    const s = stats?.inferenceStats;
    expect(s?.success?.count).toBe(4n);
    expect(s?.fail?.count).toBe(1n);
    expect(s?.queue?.count).toBe(4n);
    expect(s?.computeInput?.count).toBe(4n);
    expect(s?.computeInfer?.count).toBe(4n);
    expect(s?.computeOutput?.count).toBe(4n);
    expect(s?.cacheHit?.count ?? 0n).toBe(0n);
    expect(s?.cacheMiss?.count ?? 0n).toBe(0n);
    expect(s?.success?.ns).toBeGreaterThan(0n);
    expect(s?.computeInfer?.ns).toBeGreaterThan(0n);
    expect(s?.success?.ns).toBeGreaterThanOrEqual(s?.computeInfer?.ns ?? 0n);
    expect(
      stats?.batchStats.map((b) => ({
        size: b.batchSize,
        input: b.computeInput?.count,
        infer: b.computeInfer?.count,
        output: b.computeOutput?.count,
      })),
    ).toEqual([
      { size: 1n, input: 3n, infer: 3n, output: 3n },
      { size: 2n, input: 1n, infer: 1n, output: 1n },
    ]);

    const versioned = await client.modelStatistics({ name: "simple", version: "1" });
    expect(versioned.modelStats.map((m) => [m.name, m.version, m.inferenceCount])).toEqual([["simple", "1", 5n]]);

    // No name: every READY model version, untouched ones with zero counts.
    const all = await client.modelStatistics({});
    expect(all.modelStats.map((m) => m.name).sort()).toEqual(["simple", "simple_int8"]);
    const int8 = all.modelStats.find((m) => m.name === "simple_int8");
    expect(int8?.inferenceCount).toBe(0n);
    expect(int8?.lastInference).toBe(0n);
    expect(int8?.batchStats).toEqual([]);
  });

  it("answers INVALID_ARGUMENT for a model with no READY version", async () => {
    const { client } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    await expectGrpcError(
      client.modelStatistics({ name: "simple_string" }),
      Code.InvalidArgument,
      "requested model 'simple_string' is not available",
    );
    await expectGrpcError(
      client.modelStatistics({ name: "nope" }),
      Code.InvalidArgument,
      "requested model 'nope' is not available",
    );
  });
});

describe("model repository", () => {
  it("lists every model with its state in RepositoryIndex, and refuses a repository_name", async () => {
    const { client } = await startServer();
    const index = await client.repositoryIndex({});
    expect(index.models.map((m) => [m.name, m.version, m.state, m.reason])).toEqual([
      ["add_sub", "1", "READY", ""],
      ["bls_async", "1", "READY", ""],
      ["bls_decoupled", "1", "READY", ""],
      ["bls_sync", "1", "READY", ""],
      ["classifier_pipeline", "1", "READY", ""],
      ["ensemble_add_sub", "1", "READY", ""],
      ["mlp_classifier", "1", "READY", ""],
      ["postprocess", "1", "READY", ""],
      ["preprocess", "1", "READY", ""],
      ["repeat_int32", "1", "READY", ""],
      ["simple", "1", "READY", ""],
      ["simple_dyna_sequence", "1", "READY", ""],
      ["simple_identity", "1", "READY", ""],
      ["simple_int8", "1", "READY", ""],
      ["simple_sequence", "1", "READY", ""],
      ["simple_string", "1", "READY", ""],
      ["square_int32", "1", "READY", ""],
    ]);
    expect((await client.repositoryIndex({ ready: true })).models).toHaveLength(17);
    await expectGrpcError(
      client.repositoryIndex({ repositoryName: "models" }),
      Code.Unimplemented,
      "'repository_name' specification is not supported",
    );
  });

  it("refuses RepositoryModelLoad/Unload with UNAVAILABLE when the control mode is not explicit", async () => {
    const { client } = await startServer();
    const message = "explicit model load / unload is not allowed if polling is enabled";
    await expectGrpcError(client.repositoryModelLoad({ modelName: "simple" }), Code.Unavailable, message);
    await expectGrpcError(client.repositoryModelUnload({ modelName: "simple" }), Code.Unavailable, message);
    expect((await client.modelReady({ name: "simple" })).ready).toBe(true);
  });

  describe("explicit mode on a temporary repository", () => {
    async function explicitServer(): Promise<Running & { repo: string }> {
      const repo = tempRepository(["simple", "simple_int8"]);
      return { ...(await startServer({ modelRepositories: [repo], controlMode: "explicit" })), repo };
    }

    it("loads and unloads: the index follows, an unloaded model is UNAVAILABLE with reason 'unloaded'", async () => {
      const { client } = await explicitServer();
      const index = async () =>
        (await client.repositoryIndex({})).models.map((m) => [m.name, m.version, m.state, m.reason]);
      expect(await index()).toEqual([
        ["simple", "", "", ""],
        ["simple_int8", "", "", ""],
      ]);
      await expectGrpcError(
        client.modelReady({ name: "simple" }),
        Code.NotFound,
        "Request for unknown model: 'simple' is not found",
      );

      await client.repositoryModelLoad({ modelName: "simple" });
      expect(await index()).toEqual([
        ["simple", "1", "READY", ""],
        ["simple_int8", "", "", ""],
      ]);
      expect((await client.modelReady({ name: "simple" })).ready).toBe(true);
      expect(readInt32(rawOutput(await client.modelInfer(simpleRequest(A, B)), "OUTPUT0"))).toEqual(SUM);

      await client.repositoryModelUnload({ modelName: "simple" });
      expect(await index()).toEqual([
        ["simple", "1", "UNAVAILABLE", "unloaded"],
        ["simple_int8", "", "", ""],
      ]);
      expect((await client.repositoryIndex({ ready: true })).models).toEqual([]);
      expect((await client.modelReady({ name: "simple" })).ready).toBe(false);
      await expectGrpcError(
        client.modelInfer(simpleRequest(A, B)),
        Code.NotFound,
        "Request for unknown model: 'simple' has no available versions",
      );
      await expectGrpcError(
        client.modelStatistics({ name: "simple" }),
        Code.InvalidArgument,
        "requested model 'simple' is not available",
      );

      // Loading again brings it back; unload_dependents (bool_param) on a model with no dependents unloads it alone.
      await client.repositoryModelLoad({ modelName: "simple" });
      await client.repositoryModelLoad({ modelName: "simple_int8" });
      expect((await client.modelReady({ name: "simple" })).ready).toBe(true);
      await client.repositoryModelUnload({
        modelName: "simple",
        parameters: { unload_dependents: { parameterChoice: { case: "boolParam", value: true } } },
      });
      expect(await index()).toEqual([
        ["simple", "1", "UNAVAILABLE", "unloaded"],
        ["simple_int8", "1", "READY", ""],
      ]);
    });

    it("loads with a JSON config override (string_param), and reloads from disk without one", async () => {
      const { client } = await explicitServer();
      await client.repositoryModelLoad({
        modelName: "simple",
        parameters: { config: { parameterChoice: { case: "stringParam", value: '{"max_batch_size":"16"}' } } },
      });
      const config = (await client.modelConfig({ name: "simple" })).config;
      expect(config?.maxBatchSize).toBe(16);
      // The override replaces config.pbtxt; auto-complete fills the I/O from the ONNX file.
      expect(config?.input.map((i) => i.name).sort()).toEqual(["INPUT0", "INPUT1"]);
      const a16 = range(256);
      const big = await client.modelInfer(simpleRequest(a16, a16));
      expect(outputShape(big, "OUTPUT0")).toEqual([16, 16]);
      expect(readInt32(rawOutput(big, "OUTPUT0"))).toEqual(a16.map((v) => 2 * v));

      await client.repositoryModelLoad({ modelName: "simple" });
      expect((await client.modelConfig({ name: "simple" })).config?.maxBatchSize).toBe(8);
    });

    it("loads a model from file: overrides (bytes_param) with a config, and rejects paths that escape", async () => {
      const { client } = await explicitServer();
      const onnx = readFileSync(join(EXAMPLES, "simple", "1", "model.onnx"));
      const config = JSON.stringify({
        backend: "onnxruntime",
        max_batch_size: 8,
        input: [
          { name: "INPUT0", data_type: "TYPE_INT32", dims: [16] },
          { name: "INPUT1", data_type: "TYPE_INT32", dims: [16] },
        ],
        output: [
          { name: "OUTPUT0", data_type: "TYPE_INT32", dims: [16] },
          { name: "OUTPUT1", data_type: "TYPE_INT32", dims: [16] },
        ],
      });
      await client.repositoryModelLoad({
        modelName: "custom_simple",
        parameters: {
          config: { parameterChoice: { case: "stringParam", value: config } },
          "file:1/model.onnx": { parameterChoice: { case: "bytesParam", value: onnx } },
        },
      });
      expect((await client.modelConfig({ name: "custom_simple" })).config?.name).toBe("custom_simple");
      const response = await client.modelInfer({ ...simpleRequest(A, B), modelName: "custom_simple" });
      expect(response.modelName).toBe("custom_simple");
      expect(readInt32(rawOutput(response, "OUTPUT1"))).toEqual(DIFF);
      const row = (await client.repositoryIndex({})).models.find((m) => m.name === "custom_simple");
      expect([row?.version, row?.state]).toEqual(["1", "READY"]);

      for (const escaping of ["file:../x", "file:1/../../x", "file:/../x"]) {
        await expectGrpcError(
          client.repositoryModelLoad({
            modelName: "escaping",
            parameters: {
              config: { parameterChoice: { case: "stringParam", value: config } },
              [escaping]: { parameterChoice: { case: "bytesParam", value: onnx } },
            },
          }),
          Code.InvalidArgument,
        );
      }
      expect((await client.repositoryIndex({ ready: true })).models.map((m) => m.name)).toEqual(["custom_simple"]);

      await client.repositoryModelUnload({ modelName: "custom_simple" });
      expect((await client.modelReady({ name: "custom_simple" })).ready).toBe(false);
    });

    it("fails to load an unknown model or a malformed override with 'failed to load'", async () => {
      const { client } = await explicitServer();
      const unknown = await expectGrpcError(client.repositoryModelLoad({ modelName: "nope" }), Code.Internal);
      expect(unknown.rawMessage).toContain("failed to load 'nope'");
      const malformed = await grpcFailure(
        client.repositoryModelLoad({
          modelName: "simple",
          parameters: { config: { parameterChoice: { case: "stringParam", value: "{not json" } } },
        }),
      );
      expect(malformed.rawMessage).toContain("failed to load 'simple'");
      // `config` must be a string_param.
      await expectGrpcError(
        client.repositoryModelLoad({
          modelName: "simple",
          parameters: { config: { parameterChoice: { case: "bytesParam", value: new TextEncoder().encode("{}") } } },
        }),
        Code.InvalidArgument,
      );
    });

    it("loads an ensemble's composing models with it; unload_dependents unloads them too", async () => {
      const { client, repo } = await explicitServer();
      mkdirSync(join(repo, "simple_ensemble", "1"), { recursive: true });
      writeFileSync(
        join(repo, "simple_ensemble", "config.pbtxt"),
        `name: "simple_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "IN1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "IN0" }
      input_map { key: "INPUT1" value: "IN1" }
      output_map { key: "OUTPUT0" value: "SUM" }
      output_map { key: "OUTPUT1" value: "DIFF" }
    }
  ]
}
`,
      );
      const ready = async (name: string) =>
        (await client.repositoryIndex({ ready: true })).models.some((m) => m.name === name);
      const state = async (name: string) => (await client.repositoryIndex({})).models.find((m) => m.name === name);

      // Loading an ensemble in explicit mode also loads its composing models (§4.4), whether or not
      // the ensemble itself can run yet.
      await client.repositoryModelLoad({ modelName: "simple_ensemble" }).catch(() => undefined);
      expect(await ready("simple")).toBe(true);
      await client.repositoryModelUnload({ modelName: "simple_ensemble" });
      expect(await ready("simple")).toBe(true);

      await client.repositoryModelLoad({ modelName: "simple_ensemble" }).catch(() => undefined);
      await client.repositoryModelUnload({
        modelName: "simple_ensemble",
        parameters: { unload_dependents: { parameterChoice: { case: "boolParam", value: true } } },
      });
      expect(await ready("simple")).toBe(false);
      expect(await state("simple")).toMatchObject({ state: "UNAVAILABLE", reason: "unloaded" });
      expect(await state("simple_int8")).toMatchObject({ version: "", state: "" });
    });
  });
});

describe("shared memory, trace and logging", () => {
  it("answers the shared-memory and trace RPCs with the documented statuses (client shared memory off)", async () => {
    const { client } = await startServer();
    expect((await client.systemSharedMemoryStatus({})).regions).toEqual({});
    expect((await client.cudaSharedMemoryStatus({})).regions).toEqual({});
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "input_data", key: "/input_data", byteSize: 64n }),
      Code.Unimplemented,
    );
    await expectGrpcError(client.systemSharedMemoryUnregister({ name: "" }), Code.Unimplemented);
    await expectGrpcError(
      client.cudaSharedMemoryRegister({ name: "r", rawHandle: new Uint8Array(64), deviceId: 0n, byteSize: 64n }),
      Code.InvalidArgument,
      "failed to register CUDA shared memory region: 'r', GPUs not supported",
    );
    // CUDA unregister succeeds even without a GPU (§1.2).
    await client.cudaSharedMemoryUnregister({ name: "" });
    expect((await client.traceSetting({})).settings.trace_level?.value).toEqual(["OFF"]);
    expect((await client.traceSetting({ modelName: "simple" })).settings.trace_rate?.value).toEqual(["1000"]);
  });

  it("answers system shared-memory register/unregister with Triton's 'client shared memory is disabled' message", async () => {
    const { client } = await startServer();
    const message = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
    await expectGrpcError(
      client.systemSharedMemoryRegister({ name: "input_data", key: "/input_data", byteSize: 64n }),
      Code.Unimplemented,
      message,
    );
    await expectGrpcError(client.systemSharedMemoryUnregister({ name: "input_data" }), Code.Unimplemented, message);
  });

  it("gets and sets LogSettings: uint32 log_verbose_level, bool log_info, and refuses a bad log_format", async () => {
    const { log } = recordingLog();
    const { client } = await startServer({ log });
    const value = (response: Awaited<ReturnType<typeof client.logSettings>>, key: string) =>
      response.settings[key]?.parameterChoice;
    const current = await client.logSettings({});
    expect(value(current, "log_file")).toEqual({ case: "stringParam", value: "" });
    expect(value(current, "log_info")).toEqual({ case: "boolParam", value: true });
    expect(value(current, "log_warning")).toEqual({ case: "boolParam", value: true });
    expect(value(current, "log_error")).toEqual({ case: "boolParam", value: true });
    expect(value(current, "log_verbose_level")).toEqual({ case: "uint32Param", value: 0 });
    expect(value(current, "log_format")).toEqual({ case: "stringParam", value: "default" });

    const updated = await client.logSettings({
      settings: {
        log_verbose_level: { parameterChoice: { case: "uint32Param", value: 2 } },
        log_info: { parameterChoice: { case: "boolParam", value: false } },
        log_format: { parameterChoice: { case: "stringParam", value: "ISO8601" } },
      },
    });
    expect(value(updated, "log_verbose_level")).toEqual({ case: "uint32Param", value: 2 });
    expect(value(updated, "log_info")).toEqual({ case: "boolParam", value: false });
    expect(value(updated, "log_format")).toEqual({ case: "stringParam", value: "ISO8601" });
    expect(log.settings).toMatchObject({ log_verbose_level: 2, log_info: false, log_format: "ISO8601" });
    const again = await client.logSettings({});
    expect(value(again, "log_verbose_level")).toEqual({ case: "uint32Param", value: 2 });
    expect(value(again, "log_info")).toEqual({ case: "boolParam", value: false });

    await expectGrpcError(
      client.logSettings({ settings: { log_format: { parameterChoice: { case: "stringParam", value: "xml" } } } }),
      Code.Unavailable,
      "invalid argument for log_format, got: xml",
    );
    await expectGrpcError(
      client.logSettings({
        settings: { log_file: { parameterChoice: { case: "stringParam", value: "/tmp/galley.log" } } },
      }),
      Code.Unimplemented,
    );
    await expectGrpcError(
      client.logSettings({ settings: { log_info: { parameterChoice: { case: "stringParam", value: "yes" } } } }),
      Code.InvalidArgument,
    );
    expect(log.settings.log_format).toBe("ISO8601");
  });
});

describe("restricted protocols, health, other protocols", () => {
  it("requires the triton-grpc-protocol-<key> header on restricted protocols only", async () => {
    const { client } = await startServer({
      grpc: { host: "127.0.0.1", port: 0, restricted: [{ protocols: ["inference"], key: "k", value: "v" }] },
    });
    const restricted = "This protocol is restricted, expecting header 'triton-grpc-protocol-k'";
    await expectGrpcError(client.modelInfer(simpleRequest(A, B)), Code.Unavailable, restricted);
    await expectGrpcError(
      client.modelInfer(simpleRequest(A, B), { headers: { "triton-grpc-protocol-k": "wrong" } }),
      Code.Unavailable,
      restricted,
    );
    const allowed = await client.modelInfer(simpleRequest(A, B), { headers: { "triton-grpc-protocol-k": "v" } });
    expect(readInt32(rawOutput(allowed, "OUTPUT0"))).toEqual(SUM);

    // ModelStreamInfer is in the inference protocol too.
    const stream = client.modelStreamInfer(
      (async function* () {
        yield simpleRequest(A, B);
      })(),
    );
    await expectGrpcError(
      (async () => {
        for await (const _ of stream) {
          // drain
        }
      })(),
      Code.Unavailable,
      restricted,
    );
    // Other protocols are open.
    expect((await client.serverLive({})).live).toBe(true);
    expect((await client.modelMetadata({ name: "simple" })).name).toBe("simple");
    expect((await client.repositoryIndex({})).models.length).toBeGreaterThan(0);
  });

  it("answers grpc.health.v1.Health/Check with SERVING, and NOT_SERVING once shutdown begins", async () => {
    const { server, grpcUrl } = await startServer();
    const health = createClient(Health, createGrpcTransport({ baseUrl: grpcUrl }));
    expect((await health.check({})).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: "inference.GRPCInferenceService" })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    server.core.beginShutdown();
    expect((await health.check({})).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
  });

  it("serves the gRPC-Web and Connect protocols on the same port", async () => {
    const { grpcUrl } = await startServer();
    const web = createClient(GRPCInferenceService, createGrpcWebTransport({ baseUrl: grpcUrl, httpVersion: "2" }));
    const viaWeb = await web.modelInfer(simpleRequest(A, B, { id: "web" }));
    expect(viaWeb.id).toBe("web");
    expect(readInt32(rawOutput(viaWeb, "OUTPUT1"))).toEqual(DIFF);

    const connect = createClient(GRPCInferenceService, createConnectTransport({ baseUrl: grpcUrl, httpVersion: "2" }));
    const metadata = await connect.modelMetadata({ name: "simple" });
    expect(metadata.inputs.map((i) => i.shape.map(Number))).toEqual([
      [-1, 16],
      [-1, 16],
    ]);
    await expectGrpcError(
      connect.modelReady({ name: "x" }),
      Code.NotFound,
      "Request for unknown model: 'x' is not found",
    );
  });
});
