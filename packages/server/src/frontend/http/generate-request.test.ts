import { describe, expect, it } from "vitest";
import { generateShape } from "./generate-request.js";
import { encodeGenerateResponse } from "./generate-response.js";

describe("generateShape", () => {
  it("divides the count by the fixed dimensions and gives the rest to the innermost -1", () => {
    expect(generateShape([16], 16)).toEqual([16]);
    expect(generateShape([-1, 16], 16)).toEqual([1, 16]);
    expect(generateShape([-1, 16], 32)).toEqual([2, 16]);
    expect(generateShape([-1, -1], 5)).toEqual([1, 5]);
    expect(generateShape([-1, 2, -1], 6)).toEqual([1, 2, 3]);
    expect(generateShape([-1], 0)).toEqual([0]);
    expect(generateShape([], 1)).toEqual([]);
  });

  it("fails when a fixed dimension does not divide the count or values are left over", () => {
    expect(generateShape([16], 15)).toBeUndefined();
    expect(generateShape([-1, 16], 15)).toBeUndefined();
    expect(generateShape([4], 8)).toBeUndefined();
    expect(generateShape([1], 0)).toBeUndefined();
  });
});

describe("encodeGenerateResponse", () => {
  const int32 = (name: string, values: number[], shape = [values.length]) => ({
    name,
    datatype: "INT32" as const,
    shape,
    data: new Uint8Array(Int32Array.from(values).buffer),
    parameters: {},
  });

  it("writes one flat object in byte order, single elements unwrapped, parameters as keys", () => {
    const text = encodeGenerateResponse({
      modelName: "m",
      modelVersion: "2",
      id: "x",
      parameters: { score: 0.5, count: 3n, done: true, text: "t" },
      outputs: [int32("b", [1, 2]), int32("A", [7], [1, 1]), int32("empty", [], [0])],
    }).toString();
    expect(text).toBe(
      '{"A":7,"b":[1,2],"count":3,"done":true,"empty":[],"id":"x","model_name":"m","model_version":"2","score":0.5,"text":"t"}',
    );
  });

  it("keeps the first of equal names: model fields, then parameters, then outputs", () => {
    const text = encodeGenerateResponse({
      modelName: "m",
      modelVersion: "1",
      id: "",
      parameters: { model_name: "shadowed", OUT: "parameter" },
      outputs: [int32("OUT", [1])],
    }).toString();
    expect(text).toBe('{"OUT":"parameter","model_name":"m","model_version":"1"}');
  });
});
