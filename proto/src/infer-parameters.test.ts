import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { InferParameterSchema } from "./index.js";
import { fromInferParameter, fromInferParameters, toInferParameter, toInferParameters } from "./infer-parameters.js";

const choice = (value: Parameters<typeof toInferParameter>[0], unsigned = false) =>
  toInferParameter(value, unsigned).parameterChoice;

describe("InferParameter ↔ plain values", () => {
  it("chooses the oneof case from the value's type", () => {
    expect(choice(true)).toEqual({ case: "boolParam", value: true });
    expect(choice("x")).toEqual({ case: "stringParam", value: "x" });
    expect(choice(-3n)).toEqual({ case: "int64Param", value: -3n });
    expect(choice(7)).toEqual({ case: "int64Param", value: 7n });
    expect(choice(0.5)).toEqual({ case: "doubleParam", value: 0.5 });
    expect(choice(Number.NaN)).toEqual({ case: "doubleParam", value: Number.NaN });
  });

  it("gives the message create gives, field for field", () => {
    for (const [value, unsigned] of [
      [true, false],
      ["s", false],
      [-3n, false],
      [7, true],
      [0.5, false],
    ] as const) {
      const parameter = toInferParameter(value, unsigned);
      expect(parameter).toStrictEqual(create(InferParameterSchema, { parameterChoice: parameter.parameterChoice }));
    }
  });

  it("uses uint64 for integers when asked, never for doubles", () => {
    expect(choice(7, true)).toEqual({ case: "uint64Param", value: 7n });
    expect(choice(2n ** 63n, true)).toEqual({ case: "uint64Param", value: 2n ** 63n });
    expect(choice(0.5, true)).toEqual({ case: "doubleParam", value: 0.5 });
    expect(choice(false, true)).toEqual({ case: "boolParam", value: false });
  });

  it("reads every case back, and nothing from an unset oneof", () => {
    for (const value of [true, "s", 5n, 1.25]) expect(fromInferParameter(toInferParameter(value))).toBe(value);
    expect(fromInferParameter(toInferParameter(9n, true))).toBe(9n);
    expect(fromInferParameter(create(InferParameterSchema))).toBeUndefined();
  });

  it("converts maps, with unsigned keys and unset entries left out", () => {
    const map = toInferParameters({ priority: 2, timeout: 100, tag: "a" }, ["priority"]);
    expect(map.priority?.parameterChoice).toEqual({ case: "uint64Param", value: 2n });
    expect(map.timeout?.parameterChoice).toEqual({ case: "int64Param", value: 100n });
    expect(fromInferParameters({ ...map, unset: create(InferParameterSchema) })).toEqual({
      priority: 2n,
      timeout: 100n,
      tag: "a",
    });
  });

  it("keeps a __proto__ key as an ordinary entry", () => {
    const map = toInferParameters(JSON.parse('{"__proto__": 1}'));
    expect(Object.keys(map)).toEqual(["__proto__"]);
    expect(Object.getPrototypeOf(fromInferParameters(map))).toBe(Object.prototype);
  });
});
