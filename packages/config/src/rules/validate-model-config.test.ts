import { describe, expect, it } from "vitest";
import { parseModelConfig } from "../text-format.js";
import { normalizeModelConfig } from "./normalize.js";
import { validateModelConfig } from "./validate-model-config.js";

function messages(text: string): string[] {
  const config = parseModelConfig(`name: "m" ${text}`);
  normalizeModelConfig(config);
  return validateModelConfig(config).map((d) => d.message);
}

const onnx = 'backend: "onnxruntime" platform: "onnxruntime_onnx"';
const control = (kind: string, body: string) => `control_input { name: "${kind}" control { kind: ${kind} ${body} } }`;

describe("validateModelConfig (PROTOCOL.md §4.3)", () => {
  it("accepts a well-formed batching model", () => {
    expect(
      messages(
        `${onnx} max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 4, 8 ] priority_levels: 2 default_priority_level: 1 }`,
      ),
    ).toEqual([]);
  });

  it.each([
    [
      'backend: "onnxruntime" platform: "tensorrt_plan"',
      "unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime",
    ],
    ['backend: "pytorch" platform: "libtorch"', "unexpected 'platform' and 'backend' pair, got:libtorch, pytorch"],
    ['platform: "onnxruntime_onnx"', "unexpected platform type 'onnxruntime_onnx' for m"],
    [
      'platform: "ensemble" backend: "onnxruntime"',
      "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
    ],
    [
      `${onnx} max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }`,
      "dynamic batching preferred size must be <= max batch size for m",
    ],
    [
      `${onnx} max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 0 ] }`,
      "dynamic batching preferred size must be positive for m",
    ],
    [
      `${onnx} max_batch_size: 4 dynamic_batching { priority_levels: 3 default_priority_level: 4 }`,
      "default priority level must be in range [1, 3] for m",
    ],
    [
      `${onnx} max_batch_size: 4 dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }`,
      "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m",
    ],
    [
      `${onnx} max_batch_size: 4 sequence_batching { ${control("CONTROL_SEQUENCE_START", "int32_false_true: [ 0 ]")} }`,
      "sequence batching control 'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_START for m",
    ],
    [
      `${onnx} max_batch_size: 4 sequence_batching { ${control("CONTROL_SEQUENCE_READY", "")} }`,
      "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_READY for m",
    ],
    [
      `${onnx} max_batch_size: 4 sequence_batching { ${control("CONTROL_SEQUENCE_END", "int32_false_true: [ 0, 1 ] bool_false_true: [ false, true ]")} }`,
      "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for CONTROL_SEQUENCE_END for m",
    ],
    [
      `${onnx} max_batch_size: 4 sequence_batching { ${control("CONTROL_SEQUENCE_CORRID", "data_type: TYPE_FP32")} }`,
      "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
    ],
    [
      `${onnx} max_batch_size: 4 sequence_batching { direct { minimum_slot_utilization: 1.5 } }`,
      "sequence batching minimum slot utilization must be in range (0.0, 1.0] for m",
    ],
    [
      `${onnx} sequence_batching { } response_cache { enable: true }`,
      "Response Cache does not currently support model m with sequence batching scheduler. Please disable the response cache.",
    ],
    [
      `${onnx} model_transaction_policy { decoupled: true } response_cache { enable: true }`,
      "Response Cache does not currently support model m with 'decoupled' transaction policy. Please disable the response cache.",
    ],
    [
      `${onnx} model_metrics { metric_control { metric_identifier { family: "f" } } }`,
      "metric control must specify 'histogram_options'",
    ],
  ])("rejects %s", (text, message) => {
    expect(messages(text)[0]).toBe(message);
  });

  it("accepts every CORRID type Triton allows, and a minimum slot utilization of 0 (as Triton does)", () => {
    for (const type of ["TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"]) {
      expect(
        messages(`${onnx} sequence_batching { ${control("CONTROL_SEQUENCE_CORRID", `data_type: ${type}`)} }`),
      ).toEqual([]);
    }
    expect(messages(`${onnx} sequence_batching { direct { minimum_slot_utilization: 0 } }`)).toEqual([]);
  });
});
