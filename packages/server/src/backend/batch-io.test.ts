import { fromModelConfigJson } from "@galley/config";
import { encodeBytesElements } from "@galley/proto";
import { describe, expect, it } from "vitest";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Tensor } from "../base/tensor.js";
import { checkOutputs, configOutputShape, outputRules } from "./batch-io.js";

const output = (reshape: number[] | undefined, dims: number[]) =>
  fromModelConfigJson({
    name: "m",
    output: [{ name: "OUT", data_type: "TYPE_FP32", dims, ...(reshape ? { reshape: { shape: reshape } } : {}) }],
  }).output[0];

describe("configOutputShape", () => {
  it("keeps the model's shape for an output without reshape", () => {
    expect(configOutputShape([4, 6], output(undefined, [6]), true)).toEqual([4, 6]);
    expect(configOutputShape([4, 6], undefined, true)).toEqual([4, 6]);
  });

  it("gives the config's dims after the batch dimension, a -1 taking the elements left", () => {
    expect(configOutputShape([4, 6], output([6], [2, 3]), true)).toEqual([4, 2, 3]);
    expect(configOutputShape([4, 6], output([6], [-1, 3]), true)).toEqual([4, 2, 3]);
    expect(configOutputShape([2, 12], output([24], [4, -1]), false)).toEqual([4, 6]);
  });
});

const rules = outputRules(
  fromModelConfigJson({
    name: "m",
    max_batch_size: 4,
    input: [{ name: "IN", data_type: "TYPE_INT32", dims: [-1] }],
    output: [
      { name: "VEC", data_type: "TYPE_FP32", dims: [-1, 2] },
      { name: "TEXT", data_type: "TYPE_STRING", dims: [1] },
    ],
    sequence_batching: {
      state: [{ input_name: "STATE_IN", output_name: "STATE_OUT", data_type: "TYPE_INT32", dims: [1] }],
    },
  }),
);

function request(batch: number, outputs: string[] = []): InferenceRequest {
  return {
    modelName: "m",
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [{ name: "IN", datatype: "INT32", shape: [batch, 3], data: new Uint8Array(batch * 12), parameters: {} }],
    outputs: outputs.map((name) => ({ name, parameters: {} })),
  };
}

function tensor(name: string, datatype: string, shape: number[], data: Uint8Array): Tensor {
  return { name, datatype: datatype as Tensor["datatype"], shape, data, parameters: {} };
}

const vec = (shape = [2, 3, 2], bytes = 48) => tensor("VEC", "FP32", shape, new Uint8Array(bytes));
const text = (elements = ["a", "b"], shape = [2, 1]) =>
  tensor("TEXT", "BYTES", shape, encodeBytesElements(elements.map((e) => new TextEncoder().encode(e))));

describe("checkOutputs", () => {
  it("accepts outputs named in the config, wildcard dims and the request's batch size included", () => {
    expect(checkOutputs(rules, request(2), [vec(), text()])).toBeUndefined();
    expect(checkOutputs(rules, request(2, ["TEXT"]), [text()])).toBeUndefined();
  });

  it("returns tensors as the model made them: another datatype or shape than the config's, as Triton", () => {
    // bls_decoupled's INT64 sum into a TYPE_INT32 output; a float16 result into TYPE_FP32.
    expect(checkOutputs(rules, request(2), [tensor("VEC", "INT64", [2, 3, 2], new Uint8Array(96)), text()])).toBe(
      undefined,
    );
    expect(checkOutputs(rules, request(2), [tensor("VEC", "FP16", [2, 3, 2], new Uint8Array(24))])).toBeUndefined();
    expect(checkOutputs(rules, request(2), [vec([2, 6], 48), text(["a"], [1])])).toBeUndefined();
    expect(checkOutputs(rules, request(2), [vec([1, 3, 2], 24)])).toBeUndefined();
  });

  it("leaves a requested output the model did not produce out, without an error", () => {
    expect(checkOutputs(rules, request(2, ["VEC", "TEXT"]), [vec()])).toBeUndefined();
    expect(checkOutputs(rules, request(2), [])).toBeUndefined();
  });

  it("lets sequence-state outputs through unrequested, whatever their datatype", () => {
    const state = tensor("STATE_OUT", "INT32", [2, 1], new Uint8Array(8));
    expect(checkOutputs(rules, request(2, ["TEXT"]), [text(), state])).toBeUndefined();
    expect(
      checkOutputs(rules, request(2, ["TEXT"]), [text(), { ...state, datatype: "INT64", data: new Uint8Array(16) }]),
    ).toBe(undefined);
  });

  it.each([
    ["a name the config lacks", [vec(), text(), tensor("X", "FP32", [1], new Uint8Array(4))], "OUTPUT_UNKNOWN"],
    ["an output twice", [vec(), text(), vec()], "OUTPUT_DUPLICATE"],
    ["an unknown datatype", [tensor("VEC", "FP8" as string, [2, 3, 2], new Uint8Array(12))], "OUTPUT_UNKNOWN_DATATYPE"],
    ["bytes that do not fit the shape", [vec([2, 3, 2], 44), text()], "OUTPUT_BYTE_SIZE"],
    ["BYTES elements that do not fit the shape", [vec(), text(["a", "b", "c"])], "OUTPUT_ELEMENT_COUNT"],
  ])("refuses %s", (_, outputs, id) => {
    const error = checkOutputs(rules, request(2), outputs);
    expect(error?.id).toBe(id);
  });

  it("says what is inconsistent, naming the model and the output", () => {
    expect(checkOutputs(rules, request(2), [vec([2, 3, 3], 48)])?.message).toBe(
      "model 'm' returned output 'VEC' with 48 bytes, but its shape [2,3,3] of FP32 needs 72",
    );
    expect(checkOutputs(rules, request(2), [text(["a", "b", "c"], [2, 1])])?.message).toBe(
      "model 'm' returned BYTES output 'TEXT' with 3 elements, but its shape [2,1] needs 2",
    );
    expect(checkOutputs(rules, request(2), [{ ...vec(), datatype: "FP8" as Tensor["datatype"] }])?.message).toBe(
      "model 'm' returned output 'VEC' of unknown datatype 'FP8'",
    );
  });
});
