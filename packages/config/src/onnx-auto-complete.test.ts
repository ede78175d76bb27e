import { DataType } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { autoCompleteOnnx } from "./onnx-auto-complete.js";
import type { ModelIO } from "./onnx-io.js";
import { parseModelConfig, printModelConfig } from "./text-format.js";

const batchable: ModelIO = {
  inputs: [
    { name: "INPUT0", dataType: DataType.TYPE_FP32, dims: [-1n, 16n] },
    { name: "FLAG", dataType: DataType.TYPE_BOOL, dims: [-1n] },
  ],
  outputs: [{ name: "OUTPUT0", dataType: DataType.TYPE_FP32, dims: [-1n, 16n] }],
};
const fixed: ModelIO = {
  inputs: [{ name: "x", dataType: DataType.TYPE_INT64, dims: [3n, 4n] }],
  outputs: [{ name: "s", dataType: DataType.TYPE_INT64, dims: [] }],
};

describe("autoCompleteOnnx (PROTOCOL.md §4.5)", () => {
  it("fills a batching model: max_batch_size 4, dynamic_batching, dims without batch, scalar as [1] + reshape [], in name order", () => {
    const { config, diagnostics } = autoCompleteOnnx(parseModelConfig('name: "m"'), batchable);
    expect(diagnostics).toEqual([]);
    expect(printModelConfig(config)).toBe(
      printModelConfig(
        parseModelConfig(`name: "m" max_batch_size: 4 dynamic_batching { }
          input { name: "FLAG" data_type: TYPE_BOOL dims: [ 1 ] reshape { shape: [ ] } }
          input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }
          output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }`),
      ),
    );
  });

  it("honours --backend-config default-max-batch-size and an explicit max_batch_size", () => {
    expect(
      autoCompleteOnnx(parseModelConfig('name: "m"'), batchable, { defaultMaxBatchSize: 32 }).config.maxBatchSize,
    ).toBe(32);
    expect(autoCompleteOnnx(parseModelConfig('name: "m" max_batch_size: 2'), batchable).config.maxBatchSize).toBe(2);
  });

  it("adds no dynamic_batching with max_batch_size 1 or an existing scheduler", () => {
    expect(
      autoCompleteOnnx(parseModelConfig("max_batch_size: 1"), batchable).config.schedulingChoice.case,
    ).toBeUndefined();
    const sequence = autoCompleteOnnx(parseModelConfig("sequence_batching { }"), batchable).config;
    expect(sequence.schedulingChoice.case).toBe("sequenceBatching");
  });

  it("fills a non-batching model with full dims; a scalar becomes [1] without reshape", () => {
    const { config } = autoCompleteOnnx(parseModelConfig('name: "m"'), fixed);
    expect(config.maxBatchSize).toBe(0);
    expect(config.input.map((i) => i.dims)).toEqual([[3n, 4n]]);
    expect(config.output.map((o) => [o.dims, o.reshape])).toEqual([[[1n], undefined]]);
  });

  it("rejects max_batch_size for a model that cannot batch, with Triton's message", () => {
    expect(autoCompleteOnnx(parseModelConfig('name: "m" max_batch_size: 8'), fixed).diagnostics).toEqual([
      {
        path: "max_batch_size",
        message:
          "autofill failed for model 'm': model does not support batching while non-zero max_batch_size is specified",
      },
    ]);
  });

  it("is skipped when inputs and outputs are given, and completes only the missing side", () => {
    const full = parseModelConfig(
      `name: "m" input { name: "a" data_type: TYPE_FP32 dims: [ 1 ] } output { name: "b" data_type: TYPE_FP32 dims: [ 1 ] }`,
    );
    const skipped = autoCompleteOnnx(full, batchable);
    expect(skipped.config).toEqual(full);
    expect(skipped.notes[0]).toMatch(/skipping model configuration auto-complete for 'm'/);
    const half = autoCompleteOnnx(
      parseModelConfig(`name: "m" max_batch_size: 2 input { name: "mine" data_type: TYPE_FP32 dims: [ 16 ] }`),
      batchable,
    );
    expect(half.config.input.map((i) => i.name)).toEqual(["mine"]);
    expect(half.config.output.map((o) => o.name)).toEqual(["OUTPUT0"]);
  });
});
