import { create } from "@bufbuild/protobuf";
import { ModelConfigSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import type { ModelMetadata } from "../client-types.js";
import { encodeValues, fileInputs, generatedInputs, modelShape, PerfInputError } from "./inputs.js";

const simple: ModelMetadata = {
  name: "simple",
  versions: ["1"],
  platform: "onnxruntime_onnx",
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [-1, 16] },
    { name: "INPUT1", datatype: "INT32", shape: [-1, 16] },
  ],
  outputs: [
    { name: "OUTPUT0", datatype: "INT32", shape: [-1, 16] },
    { name: "OUTPUT1", datatype: "INT32", shape: [-1, 16] },
  ],
};
/** The values of a tensor's bytes (copied, so alignment does not matter). */
const int32s = (data: Uint8Array | undefined) => [...new Int32Array(new Uint8Array(data ?? []).buffer)];
const float32s = (data: Uint8Array | undefined) => [...new Float32Array(new Uint8Array(data ?? []).buffer)];

const batching = create(ModelConfigSchema, { name: "simple", maxBatchSize: 8 });

const variable: ModelMetadata = {
  name: "identity",
  versions: ["1"],
  platform: "js",
  inputs: [{ name: "IN", datatype: "FP32", shape: [-1] }],
  outputs: [{ name: "OUT", datatype: "FP32", shape: [-1] }],
};
const notBatching = create(ModelConfigSchema, { name: "identity", maxBatchSize: 0 });

describe("modelShape", () => {
  it("drops the batch dimension of a batching model and sizes its outputs", () => {
    const shape = modelShape(simple, batching, 4, {});
    expect(shape.batched).toBe(true);
    expect(shape.inputs).toEqual([
      { name: "INPUT0", datatype: "INT32", dims: [16] },
      { name: "INPUT1", datatype: "INT32", dims: [16] },
    ]);
    expect(shape.outputs.map((o) => o.byteSize)).toEqual([4 * 16 * 4, 4 * 16 * 4]);
  });

  it("fills variable dimensions from --shape, and refuses what does not fit", () => {
    expect(modelShape(variable, notBatching, 1, { IN: [1000] }).inputs[0]?.dims).toEqual([1000]);
    expect(modelShape(variable, notBatching, 1, {}).outputs[0]?.byteSize).toBeUndefined();
    expect(() => modelShape(variable, notBatching, 2, {})).toThrow("does not batch");
    expect(() => modelShape(simple, batching, 16, {})).toThrow("max_batch_size 8");
    expect(() => modelShape(simple, batching, 1, { INPUT0: [8] })).toThrow("does not fit");
    expect(() => modelShape(simple, batching, 1, { NOPE: [1] })).toThrow("not an input");
    expect(() => generatedInputs(modelShape(variable, notBatching, 1, {}), 1, true, 4)).toThrow("--shape IN:");
  });
});

describe("generated inputs", () => {
  it("makes one set of the request's shape, random or zero", () => {
    const [random] = generatedInputs(modelShape(simple, batching, 2, {}), 2, true, 0);
    expect(random?.INPUT0?.shape).toEqual([2, 16]);
    expect(random?.INPUT0?.data.byteLength).toBe(2 * 16 * 4);
    const [zero] = generatedInputs(modelShape(simple, batching, 1, {}), 1, false, 0);
    expect(int32s(zero?.INPUT1?.data)).toEqual(new Array(16).fill(0));
  });

  it("makes BYTES elements of --string-length", () => {
    const strings: ModelMetadata = {
      ...simple,
      inputs: [{ name: "S", datatype: "BYTES", shape: [-1, 2] }],
      outputs: [],
    };
    const [set] = generatedInputs(modelShape(strings, batching, 1, {}), 1, true, 5);
    expect(set?.S?.data.byteLength).toBe(2 * (4 + 5));
  });
});

describe("perf_analyzer JSON input data", () => {
  const shape = modelShape(simple, batching, 1, {});
  const row = (v: number) => Array.from({ length: 16 }, () => v);

  it("reads flat arrays, nested arrays and content objects, one set per entry", () => {
    const text = JSON.stringify({
      data: [
        { INPUT0: row(1), INPUT1: [row(2)] },
        { INPUT0: { content: row(3), shape: [16] }, INPUT1: row(4) },
      ],
    });
    const sets = fileInputs(shape, 1, text);
    expect(sets).toHaveLength(2);
    expect(int32s(sets[0]?.INPUT0?.data)).toEqual(row(1));
    expect(int32s(sets[0]?.INPUT1?.data)).toEqual(row(2));
    expect(int32s(sets[1]?.INPUT0?.data)).toEqual(row(3));
    expect(sets[1]?.INPUT0?.shape).toEqual([1, 16]);
  });

  it("batches consecutive entries", () => {
    const text = JSON.stringify({ data: [1, 2, 3].map((v) => ({ INPUT0: row(v), INPUT1: row(v) })) });
    const sets = fileInputs(modelShape(simple, batching, 2, {}), 2, text);
    expect(sets).toHaveLength(3);
    expect(sets[2]?.INPUT0?.shape).toEqual([2, 16]);
    expect(int32s(sets[2]?.INPUT0?.data)).toEqual([...row(3), ...row(1)]);
  });

  it("takes a variable dimension from the values, and b64 bytes", () => {
    const s = modelShape(variable, notBatching, 1, {});
    const b64 = Buffer.from(new Float32Array([1, 2]).buffer).toString("base64");
    const sets = fileInputs(s, 1, JSON.stringify({ data: [{ IN: [1, 2, 3] }, { IN: { b64, shape: [2] } }] }));
    expect(sets.map((set) => set.IN?.shape)).toEqual([[3], [2]]);
    expect(float32s(sets[1]?.IN?.data)).toEqual([1, 2]);
  });

  it("says what is wrong, and where", () => {
    expect(() => fileInputs(shape, 1, "{", "d.json")).toThrow(PerfInputError);
    expect(() => fileInputs(shape, 1, JSON.stringify({ data: [] }))).toThrow("at least one entry");
    expect(() => fileInputs(shape, 1, JSON.stringify({ data: [{ INPUT0: row(1) }] }))).toThrow(
      "data[0]: no value for input 'INPUT1'",
    );
    expect(() => fileInputs(shape, 1, JSON.stringify({ data: [{ INPUT0: [1], INPUT1: row(1) }] }))).toThrow(
      "has 1 values",
    );
  });
});

describe("encodeValues", () => {
  it("writes every datatype little-endian", () => {
    expect([...encodeValues("INT64", [1, -1])]).toEqual([
      1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255,
    ]);
    expect([...encodeValues("BOOL", [true, false, 1])]).toEqual([1, 0, 1]);
    expect([...encodeValues("FP16", [1])]).toEqual([0x00, 0x3c]);
    expect([...encodeValues("BYTES", ["ab"])]).toEqual([2, 0, 0, 0, 97, 98]);
  });
});
