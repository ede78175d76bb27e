import { describe, expect, it } from "vitest";
import { parseModelConfig } from "../text-format.js";
import { elementCount, validateModelIOConfig } from "./validate-io.js";

const messages = (text: string) => validateModelIOConfig(parseModelConfig(`name: "m" ${text}`)).map((d) => d.message);
const tensor = (dims: string, reshape?: string) =>
  `input { name: "x" data_type: TYPE_FP32 dims: ${dims} ${reshape === undefined ? "" : `reshape { shape: ${reshape} }`} }`;

describe("validateModelIOConfig (PROTOCOL.md §4.3)", () => {
  it.each([
    ["max_batch_size: 8", tensor("[ 2, 4, -1, 6 ]", "[ 8, -1, 1, 6 ]")],
    ["max_batch_size: 8", tensor("[ 1 ]", "[ ]")],
    ["max_batch_size: 0", tensor("[ 1, 1 ]", "[ 1 ]")],
    ["max_batch_size: 0", tensor("[ -1, 16 ]")],
    ["max_batch_size: 0", tensor("[ 3, -1, -1 ]", "[ 3, -1, 1, -1 ]")],
  ])("accepts %s %s", (batch, io) => {
    expect(messages(`${batch} ${io}`)).toEqual([]);
  });

  it.each([
    [
      "max_batch_size: 0",
      tensor("[ 1 ]", "[ ]"),
      "model input 'x' cannot have empty reshape for non-batching model as scalar tensors are not supported for m",
    ],
    ["max_batch_size: 8", tensor("[ 2 ]", "[ ]"), "model input 'x' has different size for dims and reshape for m"],
    ["max_batch_size: 8", tensor("[ -1 ]", "[ 2 ]"), "model input 'x' has different size for dims and reshape for m"],
    [
      "max_batch_size: 8",
      tensor("[ 2, -1 ]", "[ 2, -1, -1 ]"),
      "model input 'x' has different number of variable-size dimensions for dims and reshape for m",
    ],
    [
      "max_batch_size: 8",
      tensor("[ 2, -1, 3 ]", "[ 3, -1, 2 ]"),
      "model input 'x' has different size for dims and reshape for m",
    ],
    [
      "max_batch_size: 8",
      tensor("[ 0 ]"),
      "model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
    ],
    [
      "max_batch_size: 8",
      tensor("[ 4 ]", "[ 0, 4 ]"),
      "model input 'x' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m",
    ],
    ["max_batch_size: 8", 'input { name: "x" data_type: TYPE_FP32 }', "model input 'x' must specify 'dims' for m"],
    ["max_batch_size: 8", 'input { name: "x" dims: [ 1 ] }', "model input 'x' must specify 'data_type' for m"],
    ["max_batch_size: 8", "input { data_type: TYPE_FP32 dims: [ 1 ] }", "model input must specify 'name' for m"],
    [
      "max_batch_size: 8",
      'input { name: "x" data_type: TYPE_FP32 dims: [ 1 ] format: FORMAT_NCHW }',
      "model input NHWC/NCHW require 3 dims for m",
    ],
    [
      "max_batch_size: 8",
      'output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] is_shape_tensor: true }',
      "shape tensors are only supported for TensorRT platform for m",
    ],
    [
      "max_batch_size: 8",
      `${tensor("[ 4 ]")} batch_input { kind: BATCH_ELEMENT_COUNT target_name: "n" data_type: TYPE_INT64 source_input: "x" }`,
      "batch input data type must be TYPE_INT32 or TYPE_FP32 for m",
    ],
  ])("rejects %s %s", (batch, io, message) => {
    expect(messages(`${batch} ${io}`)[0]).toBe(message);
  });

  it("counts elements as Triton does: 0 for an empty shape, -1 with a variable dim", () => {
    expect(elementCount([])).toBe(0n);
    expect(elementCount([2n, -1n])).toBe(-1n);
    expect(elementCount([2n, 3n, 4n])).toBe(24n);
  });

  it("reports element counts beyond int64", () => {
    expect(messages(`max_batch_size: 8 ${tensor("[ 4294967296, 4294967296 ]", "[ 4294967296, 4294967296 ]")}`)[0]).toBe(
      "element count for tensor 'x dims' exceeds maximum size of 9223372036854775807 for m",
    );
  });
});
