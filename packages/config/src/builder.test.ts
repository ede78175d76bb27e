import { DataType, ModelInput_Format, ModelInstanceGroup_Kind } from "@galley/proto";
import { describe, expect, it } from "vitest";
import {
  ConfigBuildError,
  dynamicBatching,
  ensemble,
  input,
  instanceGroup,
  modelConfig,
  output,
  sequenceBatching,
  step,
} from "./builder.js";
import { parseModelConfig } from "./text-format.js";

describe("modelConfig", () => {
  const config = modelConfig({
    name: "simple",
    backend: "onnxruntime",
    maxBatchSize: 8,
    input: [
      input("INPUT0", "TYPE_INT32", [16]),
      input("IMAGE", "FP32", [3, -1, -1], { format: ModelInput_Format.NCHW }),
    ],
    output: [output("OUTPUT0", DataType.TYPE_INT32, [16])],
    instanceGroup: [instanceGroup({ kind: "KIND_CPU", count: 2 })],
    dynamicBatching: dynamicBatching({ preferredBatchSize: [4, 8], maxQueueDelayMicroseconds: 100 }),
  });

  it("builds the message with readable helpers", () => {
    expect(config.input.map((i) => [i.name, i.dataType, i.dims])).toEqual([
      ["INPUT0", DataType.TYPE_INT32, [16n]],
      ["IMAGE", DataType.TYPE_FP32, [3n, -1n, -1n]],
    ]);
    expect(config.instanceGroup[0]).toMatchObject({ kind: ModelInstanceGroup_Kind.CPU, count: 2 });
    expect(config.schedulingChoice.case).toBe("dynamicBatching");
    expect(config.schedulingChoice.value).toMatchObject({
      preferredBatchSize: [4, 8],
      maxQueueDelayMicroseconds: 100n,
    });
  });

  it("prints itself as config.pbtxt that parses back to the same message", () => {
    const text = config.toPbtxt();
    expect(text).toContain('backend: "onnxruntime"');
    expect(text).toContain("data_type: TYPE_INT32");
    expect(parseModelConfig(text)).toEqual({ ...config });
  });

  it("prints itself as Triton's JSON", () => {
    expect(config.toJson()).toMatchObject({
      name: "simple",
      dynamic_batching: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 100 },
    });
  });

  it("takes sequence batching, but only one scheduler", () => {
    const sequence = modelConfig({
      name: "s",
      sequenceBatching: sequenceBatching({ maxSequenceIdleMicroseconds: 5_000_000 }),
    });
    expect(sequence.schedulingChoice).toMatchObject({
      case: "sequenceBatching",
      value: { maxSequenceIdleMicroseconds: 5_000_000n },
    });
    expect(() => modelConfig({ name: "both", dynamicBatching: {}, sequenceBatching: {} })).toThrow(ConfigBuildError);
  });

  it("rejects unknown datatype and kind names", () => {
    expect(() => input("x", "FLOAT" as "FP32", [1])).toThrow(/unknown data type 'FLOAT'/);
    expect(() => instanceGroup({ kind: "KIND_TPU" as "KIND_CPU" })).toThrow(/unknown instance group kind 'KIND_TPU'/);
  });
});

describe("ensemble", () => {
  const io = {
    input: [input("IMAGE", "TYPE_UINT8", [-1])],
    output: [output("CLASSES", "TYPE_STRING", [1])],
  };

  it("builds ensemble_scheduling with platform 'ensemble' and latest versions", () => {
    const built = ensemble({
      name: "pipeline",
      maxBatchSize: 8,
      ...io,
      steps: [
        step("preprocess", { inputs: { RAW: "IMAGE" }, outputs: { TENSOR: "preprocessed" } }),
        step("classifier", { inputs: { INPUT: "preprocessed" }, outputs: { OUTPUT: "logits" } }),
        step("postprocess", { version: 2, inputs: { LOGITS: "logits" }, outputs: { LABELS: "CLASSES" } }),
      ],
    });
    expect(built.platform).toBe("ensemble");
    expect(built.schedulingChoice.case).toBe("ensembleScheduling");
    const steps = built.schedulingChoice.case === "ensembleScheduling" ? built.schedulingChoice.value.step : [];
    expect(steps.map((s) => [s.modelName, s.modelVersion])).toEqual([
      ["preprocess", -1n],
      ["classifier", -1n],
      ["postprocess", 2n],
    ]);
    expect(built.toPbtxt()).toContain('platform: "ensemble"');
  });

  it("accepts steps in any order, as Triton does", () => {
    expect(() =>
      ensemble({
        name: "reordered",
        ...io,
        steps: [
          step("postprocess", { inputs: { LOGITS: "logits" }, outputs: { LABELS: "CLASSES" } }),
          step("classifier", { inputs: { INPUT: "IMAGE" }, outputs: { OUTPUT: "logits" } }),
        ],
      }),
    ).not.toThrow();
  });

  it.each([
    [
      "a tensor produced twice",
      [
        step("a", { inputs: { X: "IMAGE" }, outputs: { Y: "CLASSES" } }),
        step("b", { inputs: { X: "IMAGE" }, outputs: { Y: "CLASSES" } }),
      ],
      /ensemble tensor 'CLASSES' is produced by steps 0 and 1/,
    ],
    [
      "an input nothing produces",
      [step("a", { inputs: { X: "IMAGE", Z: "missing" }, outputs: { Y: "CLASSES" } })],
      /step 0 \(a\) reads 'missing', which nothing produces/,
    ],
    [
      "an unproduced output",
      [step("a", { inputs: { X: "IMAGE" }, outputs: { Y: "other" } })],
      /ensemble output 'CLASSES' is not produced by any step/,
    ],
    [
      "an unused ensemble input",
      [
        step("a", { inputs: { X: "t" }, outputs: { Y: "CLASSES" } }),
        step("b", { inputs: { X: "CLASSES" }, outputs: { Y: "t" } }),
      ],
      /ensemble input 'IMAGE' is not used by any step/,
    ],
    [
      "a cycle",
      [
        step("a", { inputs: { X: "IMAGE", W: "u" }, outputs: { Y: "t" } }),
        step("b", { inputs: { X: "t" }, outputs: { Y: "u" } }),
        step("c", { inputs: { X: "t" }, outputs: { Y: "CLASSES" } }),
      ],
      /steps form a cycle: (0 \(a\) -> 1 \(b\) -> 0 \(a\)|1 \(b\) -> 0 \(a\) -> 1 \(b\))/,
    ],
    [
      "a step writing an ensemble input",
      [step("a", { inputs: { X: "IMAGE" }, outputs: { Y: "IMAGE", Z: "CLASSES" } })],
      /step 0 \(a\) writes ensemble input 'IMAGE'/,
    ],
  ])("rejects %s when built", (_what, steps, message) => {
    expect(() => ensemble({ name: "bad", ...io, steps })).toThrow(ConfigBuildError);
    expect(() => ensemble({ name: "bad", ...io, steps })).toThrow(message);
  });
});
