import { describe, expect, it } from "vitest";
import { general, tensorTraceJson } from "./trace-tensor.js";

describe("trace tensors", () => {
  it("prints floats as a C++ stream does (%g, 6 significant digits)", () => {
    const cases: [number, string][] = [
      [0.1, "0.1"],
      [1 / 3, "0.333333"],
      [100, "100"],
      [123456, "123456"],
      [1234567, "1.23457e+06"],
      [0.0001, "0.0001"],
      [0.00001234, "1.234e-05"],
      [-2.5, "-2.5"],
      [999999.7, "1e+06"],
      [Number.NaN, "nan"],
      [Number.POSITIVE_INFINITY, "inf"],
    ];
    for (const [value, text] of cases) expect(general(value), String(value)).toBe(text);
  });

  it("writes BYTES escaped, BOOL as 0/1, and nothing for a tensor whose bytes are elsewhere", () => {
    const bytes = new Uint8Array([2, 0, 0, 0, 0x61, 0x22, 1, 0, 0, 0, 0x62]);
    const parse = (text: string) => JSON.parse(text).tensor;
    expect(
      parse(
        tensorTraceJson(1, "TENSOR_QUEUE_INPUT", {
          name: "S",
          datatype: "BYTES",
          shape: [2],
          data: bytes,
          parameters: {},
        }),
      ),
    ).toEqual({ name: "S", data: '"a\\"","b"', shape: "2", dtype: "BYTES" });
    const flags = new Uint8Array([1, 0, 7]);
    expect(
      parse(tensorTraceJson(1, "A", { name: "B", datatype: "BOOL", shape: [3], data: flags, parameters: {} })).data,
    ).toBe("1,0,1");
    expect(
      parse(
        tensorTraceJson(1, "A", { name: "G", datatype: "FP32", shape: [4], data: new Uint8Array(0), parameters: {} }),
      ).data,
    ).toBe("");
  });
});
