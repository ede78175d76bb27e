import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInput_Format } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { ConfigJsonError, fromModelConfigJson, printModelConfigJson, toModelConfigJson } from "./json-form.js";
import { parseModelConfig } from "./text-format.js";

const config = parseModelConfig(`
  name: "x" max_batch_size: 8
  version_policy { specific { versions: [ 1, 3 ] } }
  input { name: "a" data_type: TYPE_FP32 dims: [ -1, 16 ] reshape { shape: [ 16, -1 ] } }
  dynamic_batching {
    max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1
    default_queue_policy { default_timeout_microseconds: 7 }
    priority_queue_policy { key: 2 value { default_timeout_microseconds: 5 timeout_action: DELAY } }
  }
  instance_group { kind: KIND_GPU secondary_devices { device_id: 3 } }
  optimization { cuda { graph_spec { input { key: "a" value { dim: [ 4 ] } } } } }
  model_warmup { name: "w" batch_size: 1 inputs { key: "a" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } }
`);

describe("toModelConfigJson (Triton's JSON form, PROTOCOL.md §3.14)", () => {
  const json = toModelConfigJson(config);

  it("uses snake_case names and prints default scalars, empty lists and empty maps", () => {
    expect(json).toMatchObject({
      name: "x",
      platform: "",
      backend: "",
      max_batch_size: 8,
      output: [],
      metric_tags: {},
    });
    expect(json).not.toHaveProperty("maxBatchSize");
    expect(json).not.toHaveProperty("sequence_batching");
    expect(json).not.toHaveProperty("response_cache");
  });

  it("prints enums by name", () => {
    expect(json.input).toMatchObject([{ data_type: "TYPE_FP32", format: "FORMAT_NONE" }]);
  });

  it("turns 64-bit integers into JSON numbers where Triton does", () => {
    expect(json.input).toMatchObject([{ dims: [-1, 16], reshape: { shape: [16, -1] } }]);
    expect(json.version_policy).toEqual({ specific: { versions: [1, 3] } });
    expect(json.dynamic_batching).toMatchObject({
      max_queue_delay_microseconds: 100,
      priority_levels: 2,
      default_priority_level: 1,
      default_queue_policy: { default_timeout_microseconds: 7 },
      priority_queue_policy: { "2": { default_timeout_microseconds: 5, timeout_action: "DELAY" } },
    });
    expect(json.model_warmup).toMatchObject([{ inputs: { a: { dims: [16] } } }]);
  });

  it("keeps Triton's quirks: graph_spec dims and secondary device ids stay strings", () => {
    expect(json.optimization).toMatchObject({ cuda: { graph_spec: [{ input: { a: { dim: ["4"] } } }] } });
    expect(json.instance_group).toMatchObject([{ secondary_devices: [{ device_id: "3" }] }]);
  });

  it("round-trips through fromModelConfigJson", () => {
    expect(fromModelConfigJson(json)).toEqual(config);
    expect(fromModelConfigJson(JSON.stringify(json))).toEqual(config);
  });

  it("prints an all-default config as the empty string, as Triton does", () => {
    expect(printModelConfigJson(create(ModelConfigSchema))).toBe("");
    expect(printModelConfigJson(config)).toBe(JSON.stringify(json));
  });
});

describe("fromModelConfigJson (load-API config override)", () => {
  it("accepts numbers as strings, as Triton's client example sends them", () => {
    expect(fromModelConfigJson('{"max_batch_size":"16"}').maxBatchSize).toBe(16);
  });

  it("accepts enum names in any case and lowerCamel names", () => {
    const parsed = fromModelConfigJson({
      input: [{ name: "a", dataType: "type_fp32", format: "Format_NCHW", dims: [3] }],
    });
    expect(parsed.input[0]).toMatchObject({
      dataType: DataType.TYPE_FP32,
      format: ModelInput_Format.NCHW,
      dims: [3n],
    });
  });

  it("rejects unknown fields, bad JSON and non-objects", () => {
    expect(() => fromModelConfigJson('{"max_batch_sise":1}')).toThrow(ConfigJsonError);
    expect(() => fromModelConfigJson('{"max_batch_sise":1}')).toThrow(/max_batch_sise/);
    expect(() => fromModelConfigJson("{")).toThrow(/failed to parse the model configuration JSON/);
    expect(() => fromModelConfigJson("[]")).toThrow(/must be an object/);
    expect(() => fromModelConfigJson({ input: [{ data_type: "TYPE_NOPE" }] })).toThrow(/TYPE_NOPE/);
  });
});
