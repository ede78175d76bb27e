// The typed-array fast paths of the JSON tensor codec against their general code. Reading: the
// flat-array path of tensorFromJson against its general walk. The same values one array
// deeper (`[data]`, read in the same row-major order) always take the walk, so for any flat
// `data` — integers in and out of every type's range, negatives for unsigned types, -0, decimals,
// bigints, booleans, strings, too few or too many — both must give the same bytes or the same error.
// Writing: writeTensorJson prints an aligned integer tensor with a typed array's join and an
// unaligned one element by element through a DataView; the same bytes must print the same.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { JsonFloat, type JsonValue, parseJson } from "./json-parse.js";
import { tensorFromJson, writeTensorJson } from "./json-tensor.js";
import { formatDouble, formatDoubles, JsonWriter } from "./json-write.js";

const TYPES = ["INT8", "INT16", "INT32", "UINT8", "UINT16", "UINT32", "FP32", "FP64", "INT64", "UINT64", "BOOL"];

const element: fc.Arbitrary<JsonValue> = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: -300, max: 300 }) },
  { weight: 4, arbitrary: fc.integer() },
  {
    weight: 2,
    arbitrary: fc.constantFrom(-0, 2 ** 31, -(2 ** 31) - 1, 2 ** 32, 2 ** 53 - 1, -(2 ** 53) + 1, 65535, 65536),
  },
  { weight: 1, arbitrary: fc.bigInt({ min: -(1n << 63n), max: (1n << 64n) - 1n }) },
  { weight: 1, arbitrary: fc.double({ noNaN: true }).map((d) => new JsonFloat(d)) },
  { weight: 1, arbitrary: fc.constantFrom<JsonValue>(true, false, "1", null) },
);

/** The outcome of one decode: its bytes, or its error's message. */
function outcome(run: () => Uint8Array): string {
  try {
    return Buffer.from(run()).toString("hex");
  } catch (error) {
    return `error: ${(error as Error).message}`;
  }
}

describe("tensorFromJson's flat-array path", () => {
  it("gives the general walk's bytes or error for any flat data", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...TYPES),
        fc.array(element, { maxLength: 12 }),
        fc.integer({ min: -1, max: 1 }),
        (type, data, skew) => {
          const count = Math.max(1, data.length + skew);
          const flat = outcome(() => tensorFromJson("INPUT0", type, count, data));
          const nested = outcome(() => tensorFromJson("INPUT0", type, count, [data]));
          expect(flat).toBe(nested);
        },
      ),
      { numRuns: 5000 },
    );
  });

  it("reads a parsed request's integers as the types' wrap-around does", () => {
    const data = (parseJson(new TextEncoder().encode("[-1, 256, 65537, 4294967297]")) as JsonValue[]) ?? [];
    expect([...new Uint8Array(tensorFromJson("INPUT0", "INT8", 4, data))]).toEqual([255, 0, 1, 1]);
    expect(new Int32Array(tensorFromJson("INPUT0", "INT32", 4, data).buffer)).toEqual(
      Int32Array.from([-1, 256, 65537, 1]),
    );
    expect(() => tensorFromJson("INPUT0", "UINT32", 4, data)).toThrow();
  });
});

describe("writeTensorJson's typed-array path", () => {
  const SIZES: Record<string, number> = {
    INT8: 1,
    UINT8: 1,
    INT16: 2,
    UINT16: 2,
    INT32: 4,
    UINT32: 4,
    INT64: 8,
    UINT64: 8,
  };
  const printed = (datatype: string, bytes: Uint8Array, count: number) => {
    const writer = new JsonWriter();
    writeTensorJson(writer, {
      name: "OUTPUT0",
      datatype: datatype as "INT32",
      shape: [count],
      data: bytes,
      parameters: {},
    });
    return Buffer.from(writer.bytes()).toString();
  };

  it("prints what the element-by-element reader prints", () => {
    fc.assert(
      fc.property(fc.constantFrom(...Object.keys(SIZES)), fc.uint8Array({ maxLength: 64 }), (datatype, raw) => {
        const size = SIZES[datatype] as number;
        const count = Math.floor(raw.length / size);
        const bytes = raw.subarray(0, count * size);
        const aligned = new Uint8Array(new ArrayBuffer(bytes.length + 8), 8, bytes.length);
        aligned.set(bytes);
        const unaligned = new Uint8Array(new ArrayBuffer(bytes.length + 8), 1, bytes.length);
        unaligned.set(bytes);
        expect(printed(datatype, aligned, count)).toBe(printed(datatype, unaligned, count));
      }),
      { numRuns: 3000 },
    );
    expect(printed("INT64", new Uint8Array(new BigInt64Array([-(2n ** 63n), 5n]).buffer), 2)).toBe(
      "[-9223372036854775808,5]",
    );
  });
});

describe("formatDoubles (the float outputs' writer)", () => {
  const value = fc.oneof(
    { weight: 8, arbitrary: fc.double() },
    { weight: 2, arbitrary: fc.double({ min: -1, max: 1, noNaN: true }) },
    { weight: 1, arbitrary: fc.integer({ min: -1000, max: 1000 }) },
    { weight: 1, arbitrary: fc.constantFrom(0, -0, Number.NaN, Infinity, -Infinity, 1e21, -1e21, 1e-7, 5e-324, 1e300) },
  );
  it("prints every value as formatDouble does, for float32 and float64 arrays with any mix of values", () => {
    fc.assert(
      fc.property(fc.array(value, { maxLength: 80 }), fc.boolean(), (values, single) => {
        const array = single ? Float32Array.from(values) : Float64Array.from(values);
        expect(formatDoubles(array)).toBe(Array.from(array, formatDouble).join(","));
      }),
      { numRuns: 3000 },
    );
  });
});
