// The PyTorch (libtorch) backend end to end over gRPC, on CPU, with real TorchScript files:
// Triton's naming conventions, every datatype, the dynamic batcher, an ensemble with an ONNX
// model, and errors. libtorch must be installed (CI installs Debian's libtorch-dev): without it
// these tests fail, they do not skip.
import { copyFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { ModelConfigSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { createPyTorchBackend } from "../src/backend/pytorch/pytorch-backend.js";
import { f32, readF32, tensors, torchModel } from "./pytorch-support.js";
import {
  cleanup,
  copyModel,
  expectGrpcError,
  int32Bytes,
  quietLog,
  readInt32,
  recordingLog,
  sequenceParameters,
  startServer,
  tempRepository,
} from "./support/harness.js";

afterEach(cleanup);

const x = [1, 2, 3, 4];
const y = [10, 20, 30, 40];
const fp32Request = (model: string, names: [string, string], a = x, b = y) => ({
  modelName: model,
  inputs: [
    { name: names[0], datatype: "FP32", shape: [4n] },
    { name: names[1], datatype: "FP32", shape: [4n] },
  ],
  rawInputContents: [f32(a), f32(b)],
});

/** The response's outputs by name, as FP32 values. */
function byName(response: { outputs: { name: string }[]; rawOutputContents: Uint8Array[] }): Record<string, number[]> {
  return Object.fromEntries(response.outputs.map((o, i) => [o.name, readF32(response.rawOutputContents[i])]));
}

describe("PyTorch backend: naming conventions", () => {
  it("maps NAME__<i> inputs to forward's positions and NAME__<i> outputs to the tuple's", async () => {
    const repo = tempRepository();
    // Listed out of order on purpose: the index decides, not the config's order.
    torchModel(
      repo,
      "indexed",
      "add_sub",
      tensors("input", "INPUT__1:FP32:4", "INPUT__0:FP32:4") +
        tensors("output", "OUTPUT__1:FP32:4", "OUTPUT__0:FP32:4"),
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const response = await client.modelInfer(fp32Request("indexed", ["INPUT__0", "INPUT__1"]));
    expect(byName(response)).toEqual({ OUTPUT__1: [-9, -18, -27, -36], OUTPUT__0: [11, 22, 33, 44] });
  });

  it("maps inputs named as forward's arguments by name", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "named",
      "add_sub",
      tensors("input", "y:FP32:4", "x:FP32:4") + tensors("output", "SUM__0:FP32:4", "DIFF__1:FP32:4"),
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const response = await client.modelInfer(fp32Request("named", ["x", "y"]));
    expect(byName(response)).toEqual({ SUM__0: [11, 22, 33, 44], DIFF__1: [-9, -18, -27, -36] });
  });

  it("falls back to the config's order, with Triton's warning, when names follow neither", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "ordered",
      "add_sub",
      tensors("input", "A:FP32:4", "B:FP32:4") + tensors("output", "SUM:FP32:4", "DIFF:FP32:4"),
    );
    const { log, lines } = recordingLog();
    const { client } = await startServer({ modelRepositories: [repo], log });
    const response = await client.modelInfer(fp32Request("ordered", ["A", "B"], y, x));
    expect(byName(response)).toEqual({ SUM: [11, 22, 33, 44], DIFF: [9, 18, 27, 36] });
    expect(lines.join("\n")).toMatch(/Falling back to enforcing strict ordering from model configuration/);
  });

  it("serves a model with optimization.cuda.graphs on the CPU eagerly, saying so in the log", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "graphed",
      "add_sub",
      tensors("input", "x:FP32:4", "y:FP32:4") +
        tensors("output", "SUM__0:FP32:4", "DIFF__1:FP32:4") +
        "instance_group [ { kind: KIND_CPU } ]\noptimization { cuda { graphs: true busy_wait_events: true } }\n",
    );
    const { log, lines } = recordingLog();
    const { client } = await startServer({ modelRepositories: [repo], log });
    for (let i = 0; i < 5; i++) {
      const response = await client.modelInfer(fp32Request("graphed", ["x", "y"]));
      expect(byName(response)).toEqual({ SUM__0: [11, 22, 33, 44], DIFF__1: [-9, -18, -27, -36] });
    }
    const text = lines.join("\n");
    expect(text).toMatch(
      /graphed: optimization\.cuda\.graphs: instance group graphed_0 runs on the CPU, without graphs/,
    );
    expect(text).toMatch(/graphed: optimization\.cuda: busy_wait_events is not used by the PyTorch backend/);
    expect(text).not.toMatch(/captured a CUDA graph/);
  });

  it("maps outputs to a returned list's positions", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "listed",
      "list_out",
      tensors("input", "INPUT__0:FP32:4") + tensors("output", "PLUS_ONE__1:FP32:4", "TWICE__0:FP32:4"),
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const response = await client.modelInfer({
      modelName: "listed",
      inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [4n] }],
      rawInputContents: [f32(x)],
    });
    expect(byName(response)).toEqual({ PLUS_ONE__1: [2, 3, 4, 5], TWICE__0: [2, 4, 6, 8] });
  });
});

describe("PyTorch backend: datatypes", () => {
  const types: [string, number][] = [
    ["BOOL", 1],
    ["UINT8", 1],
    ["INT8", 1],
    ["INT16", 2],
    ["INT32", 4],
    ["INT64", 8],
    ["FP16", 2],
    ["BF16", 2],
    ["FP32", 4],
    ["FP64", 8],
  ];

  it("passes every datatype through forward byte for byte, batched", async () => {
    const repo = tempRepository();
    for (const [type] of types) {
      torchModel(
        repo,
        `identity_${type.toLowerCase()}`,
        "identity",
        `max_batch_size: 4\n${tensors("input", `INPUT__0:${type}:3`)}${tensors("output", `OUTPUT__0:${type}:3`)}`,
      );
    }
    const { client } = await startServer({ modelRepositories: [repo] });
    for (const [type, size] of types) {
      // Bytes that are valid values of every type (BOOL takes 0 and 1 only).
      const data = Uint8Array.from({ length: 2 * 3 * size }, (_, i) => (type === "BOOL" ? i % 2 : (i * 7 + 1) % 64));
      const response = await client.modelInfer({
        modelName: `identity_${type.toLowerCase()}`,
        inputs: [{ name: "INPUT__0", datatype: type, shape: [2n, 3n] }],
        rawInputContents: [data],
      });
      expect(response.outputs[0]?.datatype, type).toBe(type);
      expect(response.outputs[0]?.shape, type).toEqual([2n, 3n]);
      expect(Array.from(response.rawOutputContents[0] ?? []), type).toEqual(Array.from(data));
    }
  });

  it("computes in INT64 and FP64", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "int64",
      "add_sub",
      tensors("input", "INPUT__0:INT64:2", "INPUT__1:INT64:2") +
        tensors("output", "OUTPUT__0:INT64:2", "OUTPUT__1:INT64:2"),
    );
    torchModel(
      repo,
      "fp64",
      "add_sub",
      tensors("input", "INPUT__0:FP64:2", "INPUT__1:FP64:2") +
        tensors("output", "OUTPUT__0:FP64:2", "OUTPUT__1:FP64:2"),
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const big = 2n ** 40n;
    const i64 = await client.modelInfer({
      modelName: "int64",
      inputs: [
        { name: "INPUT__0", datatype: "INT64", shape: [2n] },
        { name: "INPUT__1", datatype: "INT64", shape: [2n] },
      ],
      rawInputContents: [
        new Uint8Array(BigInt64Array.from([big, -3n]).buffer),
        new Uint8Array(BigInt64Array.from([1n, 5n]).buffer),
      ],
    });
    expect(Array.from(new BigInt64Array((i64.rawOutputContents[0] as Uint8Array).slice().buffer))).toEqual([
      big + 1n,
      2n,
    ]);
    const f64 = await client.modelInfer({
      modelName: "fp64",
      inputs: [
        { name: "INPUT__0", datatype: "FP64", shape: [2n] },
        { name: "INPUT__1", datatype: "FP64", shape: [2n] },
      ],
      rawInputContents: [
        new Uint8Array(Float64Array.from([0.1, 1e300]).buffer),
        new Uint8Array(Float64Array.from([0.2, 1]).buffer),
      ],
    });
    expect(Array.from(new Float64Array((f64.rawOutputContents[1] as Uint8Array).slice().buffer))).toEqual([
      0.1 - 0.2,
      1e300 - 1,
    ]);
  });
});

describe("PyTorch backend: scheduling", () => {
  it("runs the dynamic batcher's batches as one forward each, every request getting its own rows", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "batched",
      "add_sub",
      `max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 200000 preferred_batch_size: [ 8 ] }
instance_group [ { kind: KIND_CPU count: 1 } ]
${tensors("input", "INPUT__0:FP32:4", "INPUT__1:FP32:4")}${tensors("output", "OUTPUT__0:FP32:4", "OUTPUT__1:FP32:4")}`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const results = await Promise.all(
      Array.from({ length: 8 }, async (_, k) => {
        const response = await client.modelInfer({
          modelName: "batched",
          inputs: [
            { name: "INPUT__0", datatype: "FP32", shape: [1n, 4n] },
            { name: "INPUT__1", datatype: "FP32", shape: [1n, 4n] },
          ],
          rawInputContents: [f32([k, k, k, k]), f32([1, 2, 3, 4])],
        });
        return byName(response);
      }),
    );
    results.forEach((r, k) => {
      expect(r.OUTPUT__0).toEqual([k + 1, k + 2, k + 3, k + 4]);
      expect(r.OUTPUT__1).toEqual([k - 1, k - 2, k - 3, k - 4]);
    });
    const stats = (await client.modelStatistics({ name: "batched" })).modelStats[0];
    expect(stats?.inferenceCount).toBe(8n);
    expect(Number(stats?.executionCount)).toBeLessThan(8);
  });

  it("answers a repeated request from the response cache", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "cached",
      "add_sub",
      `response_cache { enable: true }\n${tensors("input", "INPUT__0:FP32:4", "INPUT__1:FP32:4")}${tensors("output", "OUTPUT__0:FP32:4", "OUTPUT__1:FP32:4")}`,
    );
    const { client } = await startServer({ modelRepositories: [repo], responseCacheBytes: 1 << 20 });
    const first = byName(await client.modelInfer(fp32Request("cached", ["INPUT__0", "INPUT__1"])));
    const second = byName(await client.modelInfer(fp32Request("cached", ["INPUT__0", "INPUT__1"])));
    expect(second).toEqual(first);
    expect(second.OUTPUT__0).toEqual([11, 22, 33, 44]);
    const stats = (await client.modelStatistics({ name: "cached" })).modelStats[0];
    expect(stats?.inferenceStats?.cacheHit?.count).toBe(1n);
    expect(stats?.executionCount).toBe(1n);
  });

  it("takes the sequence batcher's control tensors as NAME__<i> arguments", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "sequence",
      "add_sub",
      `max_batch_size: 4
sequence_batching {
  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 100 ] } ] } ]
}
${tensors("input", "INPUT__0:FP32:4")}${tensors("output", "OUTPUT__0:FP32:4")}`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const step = async (start: boolean, end: boolean) =>
      byName(
        await client.modelInfer({
          modelName: "sequence",
          inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [1n, 4n] }],
          rawInputContents: [f32(x)],
          parameters: sequenceParameters(7n, start, end),
        }),
      ).OUTPUT__0;
    expect(await step(true, false)).toEqual([101, 102, 103, 104]);
    expect(await step(false, true)).toEqual([1, 2, 3, 4]);
  });

  it("serves an ensemble of an ONNX model (simple) and a libtorch model", async () => {
    const repo = tempRepository(["simple"]);
    torchModel(
      repo,
      "torch_add_sub",
      "add_sub",
      `max_batch_size: 8\n${tensors("input", "INPUT__0:INT32:16", "INPUT__1:INT32:16")}${tensors("output", "OUTPUT__0:INT32:16", "OUTPUT__1:INT32:16")}`,
    );
    const ensemble = join(repo, "onnx_then_torch");
    copyModel("simple", repo, "onnx_then_torch");
    writeFileSync(
      join(ensemble, "config.pbtxt"),
      `name: "onnx_then_torch"
platform: "ensemble"
max_batch_size: 8
${tensors("input", "A:INT32:16", "B:INT32:16")}${tensors("output", "TWICE_A:INT32:16", "TWICE_B:INT32:16")}
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
  { model_name: "torch_add_sub" model_version: -1
    input_map { key: "INPUT__0" value: "sum" } input_map { key: "INPUT__1" value: "diff" }
    output_map { key: "OUTPUT__0" value: "TWICE_A" } output_map { key: "OUTPUT__1" value: "TWICE_B" } }
] }
`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const a = Array.from({ length: 16 }, (_, i) => i);
    const b = Array.from({ length: 16 }, (_, i) => 100 - 3 * i);
    const response = await client.modelInfer({
      modelName: "onnx_then_torch",
      inputs: [
        { name: "A", datatype: "INT32", shape: [1n, 16n] },
        { name: "B", datatype: "INT32", shape: [1n, 16n] },
      ],
      rawInputContents: [int32Bytes(a), int32Bytes(b)],
    });
    const out = Object.fromEntries(response.outputs.map((o, i) => [o.name, readInt32(response.rawOutputContents[i])]));
    expect(out).toEqual({ TWICE_A: a.map((v) => 2 * v), TWICE_B: b.map((v) => 2 * v) });
  });
});

describe("PyTorch backend: errors", () => {
  async function loadError(config: string, code = Code.InvalidArgument): Promise<string> {
    const repo = tempRepository();
    torchModel(repo, "broken", "add_sub", config);
    const { client } = await startServer({ modelRepositories: [repo], controlMode: "explicit" });
    const error = await expectGrpcError(client.repositoryModelLoad({ modelName: "broken" }), code);
    return error.rawMessage;
  }
  const io = (inputs: string[], outputs: string[]) =>
    tensors("input", ...inputs.map((n) => `${n}:FP32:4`)) + tensors("output", ...outputs.map((n) => `${n}:FP32:4`));

  it("fails the load of a file that is not TorchScript with libtorch's message", async () => {
    const repo = tempRepository();
    const folder = torchModel(repo, "broken", "add_sub", io(["INPUT__0", "INPUT__1"], ["OUTPUT__0"]));
    writeFileSync(join(folder, "1", "model.pt"), "not a TorchScript file");
    const { client } = await startServer({ modelRepositories: [repo], controlMode: "explicit" });
    const error = await expectGrpcError(client.repositoryModelLoad({ modelName: "broken" }), Code.InvalidArgument);
    expect(error.rawMessage).toMatch(/unable to load model 'broken', .*(PytorchStreamReader|archive)/s);
  });

  it("fails the load when the inputs do not match forward, with Triton's messages", async () => {
    expect(await loadError(io(["INPUT__0", "INPUT__1", "INPUT__2"], ["OUTPUT__0"]))).toMatch(
      "unable to load model 'broken', configuration expects 3 inputs, model provides 2",
    );
    expect(await loadError(io(["INPUT__0", "INPUT__5"], ["OUTPUT__0"]))).toMatch(
      "input 'INPUT__5' refers to forward argument 5, but the model's forward takes 2 argument(s)",
    );
    expect(await loadError(io(["INPUT__0", "INPUT__1"], ["OUTPUT__0", "OUTPUT__2"]))).toMatch(
      "The output OUTPUT__2 in the model configuration refers to an output index which doesn't exist. This model has 2 outputs",
    );
    expect(
      await loadError(tensors("input", "INPUT__0:UINT32:4", "INPUT__1:FP32:4") + tensors("output", "OUTPUT__0:FP32:4")),
    ).toMatch("unsupported datatype TYPE_UINT32 for input 'INPUT__0' for model 'broken'");
  });

  it("fails the load of a KIND_GPU group where no GPU is usable, and of a parameter that is not a boolean", async () => {
    // The config's own check refuses it first, with Triton's message.
    expect(
      await loadError(
        `instance_group [ { kind: KIND_GPU } ]\n${io(["INPUT__0", "INPUT__1"], ["OUTPUT__0"])}`,
        Code.Internal,
      ),
    ).toMatch("instance group broken_0 of model broken has kind KIND_GPU but no GPUs are available");
    expect(
      await loadError(
        `parameters: { key: "INFERENCE_MODE" value: { string_value: "maybe" } }\n${io(["INPUT__0", "INPUT__1"], ["OUTPUT__0"])}`,
      ),
    ).toMatch(
      "unable to load model 'broken', failed to parse parameter 'INFERENCE_MODE': expected true or false, got 'maybe'",
    );
  });

  it("fails the load of a missing file, and of a model file that links outside the model's folder", async () => {
    expect(
      await loadError(`default_model_filename: "other.pt"\n${io(["INPUT__0", "INPUT__1"], ["OUTPUT__0"])}`),
    ).toMatch(/unable to find '.*other\.pt' for model instance 'broken'/);
    const repo = tempRepository();
    const folder = torchModel(repo, "linked", "add_sub", io(["INPUT__0", "INPUT__1"], ["OUTPUT__0"]));
    const outside = join(repo, "outside.pt");
    copyFileSync(join(folder, "1", "model.pt"), outside);
    rmSync(join(folder, "1", "model.pt"));
    symlinkSync(outside, join(folder, "1", "model.pt"));
    const { client } = await startServer({ modelRepositories: [repo], controlMode: "explicit" });
    await expectGrpcError(
      client.repositoryModelLoad({ modelName: "linked" }),
      Code.InvalidArgument,
      /unable to load model 'linked', 'model.pt' leads outside the model's folder/,
    );
  });

  it("fails a request that leaves one of forward's arguments without an input (an optional input)", async () => {
    const repo = tempRepository();
    torchModel(
      repo,
      "optional",
      "add_sub",
      `input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]
${tensors("output", "OUTPUT__0:FP32:4")}`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    await expectGrpcError(
      client.modelInfer({
        modelName: "optional",
        inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [4n] }],
        rawInputContents: [f32(x)],
      }),
      Code.InvalidArgument,
      "no input for forward argument 1 ('y') of model 'optional'",
    );
  });

  it("answers a request the model raises on with libtorch's message; the next request succeeds", async () => {
    const repo = tempRepository();
    torchModel(repo, "throws", "throws", tensors("input", "INPUT__0:FP32:2") + tensors("output", "OUTPUT__0:FP32:2"));
    const { client } = await startServer({ modelRepositories: [repo] });
    const request = (values: number[]) => ({
      modelName: "throws",
      inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [2n] }],
      rawInputContents: [f32(values)],
    });
    const error = await expectGrpcError(client.modelInfer(request([1, -1])), Code.Internal);
    expect(error.rawMessage).toMatch(/^PyTorch execute failure: .*negative input is not allowed/s);
    const ok = await client.modelInfer(request([1, 2]));
    expect(readF32(ok.rawOutputContents[0])).toEqual([2, 4]);
  });

  it("fails the load, and only the load, when the addon is missing, saying what to install", async () => {
    const backend = createPyTorchBackend({
      log: quietLog(),
      torch: async () => ({
        torchSupport: () => ({
          available: false,
          reason: "Could not load Galley's torch addon ... apt-get install libtorch-dev",
        }),
        loadTorchModel: () => Promise.reject(new Error("unreachable")),
      }),
    });
    const config = create(ModelConfigSchema, { name: "needs_torch", platform: "pytorch_libtorch", backend: "pytorch" });
    await expect(
      backend.load({ config, version: 1, modelPath: "/nonexistent", versionPath: "/nonexistent/1", log: quietLog() }),
    ).rejects.toThrow(
      "unable to load model 'needs_torch', Could not load Galley's torch addon ... apt-get install libtorch-dev",
    );
  });
});
