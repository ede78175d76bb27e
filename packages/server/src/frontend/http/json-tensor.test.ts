import { describe, expect, it } from "vitest";
import { InferenceError } from "../../base/errors.js";
import type { Tensor } from "../../base/tensor.js";
import { requestEncoding, responseEncoding } from "./compression.js";
import { httpStatus } from "./http-status.js";
import { asArray } from "./json-access.js";
import { JsonFloat, JsonTooDeep, type JsonValue, parseJson } from "./json-parse.js";
import { tensorFromJson, writeTensorJson } from "./json-tensor.js";
import { formatDouble, JsonWriter, jsonBytes } from "./json-write.js";

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("latin1");
const json = (source: string) => parseJson(Buffer.from(source));
const data = (source: string) => json(source) as JsonValue[];

function tensor(datatype: Tensor["datatype"], shape: number[], bytes: Uint8Array): Tensor {
  return { name: "OUT", datatype, shape, data: bytes, parameters: {} };
}
function written(t: Tensor): string {
  const w = new JsonWriter();
  writeTensorJson(w, t);
  return text(w.bytes());
}
function error(run: () => unknown): { status: number; message: string } {
  try {
    run();
  } catch (e) {
    if (e instanceof InferenceError) return { status: httpStatus(e), message: e.message };
    throw e;
  }
  throw new Error("expected an InferenceError");
}

describe("JSON output formatting (Triton's WriteDataToJson)", () => {
  it("writes INT64 and UINT64 exactly beyond 2^53", () => {
    const ints = new BigInt64Array([9007199254740993n, -(2n ** 63n), 2n ** 63n - 1n, 0n]);
    expect(written(tensor("INT64", [4], new Uint8Array(ints.buffer)))).toBe(
      "[9007199254740993,-9223372036854775808,9223372036854775807,0]",
    );
    const uints = new BigUint64Array([2n ** 64n - 1n, 2n ** 53n + 1n]);
    expect(written(tensor("UINT64", [2], new Uint8Array(uints.buffer)))).toBe(
      "[18446744073709551615,9007199254740993]",
    );
  });

  it("writes FP32 widened to double, shortest round-trip, rapidjson layout", () => {
    const floats = new Float32Array([0.1, 1, -2.5, 1e-7, 3e38, 0, 123456789, 0.000123]);
    expect(written(tensor("FP32", [8], new Uint8Array(floats.buffer)))).toBe(
      "[0.10000000149011612,1.0,-2.5,1.0000000116860974e-7,3.0000000054977558e38,0.0,123456792.0,0.0001230000052601099]",
    );
  });

  it("writes long float arrays as one-by-one formatting would, in runs or not", () => {
    const random = Array.from({ length: 4000 }, (_, i) => Math.sin(i) * 10 ** ((i % 40) - 20));
    // A few values that need rapidjson's layout (integral, huge, non-finite) among fractions, then many.
    const few = Float64Array.from(
      random,
      (v, i) => (i % 500 === 7 ? [0, -0, 2, 1e22, Number.NaN, -Infinity][i % 6] : v) as number,
    );
    const many = Float32Array.from(random, (v, i) => (i % 3 === 0 ? Math.round(v) : v));
    for (const values of [few, many, Float32Array.from(random)]) {
      const type = values instanceof Float32Array ? "FP32" : "FP64";
      const expected = `[${Array.from(values, formatDouble).join(",")}]`;
      expect(written(tensor(type, [values.length], new Uint8Array(values.buffer)))).toBe(expected);
      // Unaligned output bytes give the same text.
      const shifted = new Uint8Array(values.byteLength + 1).fill(0);
      shifted.set(new Uint8Array(values.buffer), 1);
      expect(written(tensor(type, [values.length], shifted.subarray(1)))).toBe(expected);
    }
  });

  it("lays doubles out as rapidjson does", () => {
    const cases: [number, string][] = [
      [1, "1.0"],
      [100, "100.0"],
      [123.456, "123.456"],
      [0.001234, "0.001234"],
      [0.000001, "0.000001"],
      [1e-7, "1e-7"],
      [1.5e-7, "1.5e-7"],
      [1e21, "1e21"],
      [1.5e21, "1.5e21"],
      [1e20, "100000000000000000000.0"],
      [-0, "-0.0"],
      [Number.NaN, "NaN"],
      [Infinity, "Infinity"],
      [-Infinity, "-Infinity"],
      [5e-324, "5e-324"],
    ];
    for (const [value, expected] of cases) expect(formatDouble(value), String(value)).toBe(expected);
  });

  it("writes BOOL, small integers, and BYTES with rapidjson's escaping and raw bytes", () => {
    expect(written(tensor("BOOL", [3], new Uint8Array([1, 0, 7])))).toBe("[true,false,true]");
    expect(written(tensor("INT8", [2], new Uint8Array([0xff, 0x7f])))).toBe("[-1,127]");
    expect(written(tensor("UINT16", [1], new Uint8Array([0xff, 0xff])))).toBe("[65535]");
    const bytes = Buffer.from([2, 0, 0, 0, 0x61, 0x00, 5, 0, 0, 0, 0x22, 0x5c, 0x2f, 0x1f, 0xff, 0, 0, 0, 0]);
    expect(written(tensor("BYTES", [3], bytes))).toBe('["a\\u0000","\\"\\\\/\\u001F\xff",""]');
  });

  it("refuses FP16/BF16 and data that does not match the shape", () => {
    expect(error(() => written(tensor("FP16", [1], new Uint8Array(2))))).toEqual({
      status: 400,
      message: "sending FP16 data via JSON is not supported. Please use the binary data format for output OUT",
    });
    expect(error(() => written(tensor("INT32", [2], new Uint8Array(4))))).toEqual({
      status: 500,
      message: "output tensor shape does not match size of output for 'OUT'",
    });
    expect(error(() => written(tensor("BYTES", [2], Buffer.from([1, 0, 0, 0, 0x61]))))).toEqual({
      status: 500,
      message: "output tensor shape does not match size of output for 'OUT'",
    });
  });

  it("writes any JS value compactly, bigints as numbers", () => {
    expect(text(jsonBytes({ a: [1, 2.5, "x"], b: 2n ** 64n, c: undefined, d: null, e: true }))).toBe(
      '{"a":[1,2.5,"x"],"b":18446744073709551616,"d":null,"e":true}',
    );
  });
});

describe("JSON input data (Triton's ReadDataFromJson)", () => {
  it("reads INT64/UINT64 literals exactly and truncates narrower integers", () => {
    const int64 = tensorFromJson("X", "INT64", 3, data("[9223372036854775807,-9223372036854775808,9007199254740993]"));
    expect([...new BigInt64Array(int64.buffer)]).toEqual([2n ** 63n - 1n, -(2n ** 63n), 9007199254740993n]);
    const uint64 = tensorFromJson("X", "UINT64", 1, data("[18446744073709551615]"));
    expect([...new BigUint64Array(uint64.buffer)]).toEqual([2n ** 64n - 1n]);
    const int8 = tensorFromJson("X", "INT8", 3, data("[300,-129,9223372036854775807]"));
    expect([...new Int8Array(int8.buffer)]).toEqual([44, 127, -1]);
    const uint16 = tensorFromJson("X", "UINT16", 1, data("[70000]"));
    expect([...new Uint16Array(uint16.buffer)]).toEqual([4464]);
  });

  it("reads nested arrays row-major; floats, bools and bytes", () => {
    const fp32 = tensorFromJson("X", "FP32", 4, data("[[0.1,2],[3e0,-1]]"));
    expect([...new Float32Array(fp32.buffer)]).toEqual([Math.fround(0.1), 2, 3, -1]);
    const fp64 = tensorFromJson("X", "FP64", 2, data("[NaN,-Infinity]"));
    expect([...new Float64Array(fp64.buffer)]).toEqual([Number.NaN, -Infinity]);
    expect([...tensorFromJson("X", "BOOL", 2, data("[true,false]"))]).toEqual([1, 0]);
    const bytes = tensorFromJson("X", "BYTES", 2, data('["a\\u0000b","é"]'));
    expect([...bytes]).toEqual([3, 0, 0, 0, 0x61, 0, 0x62, 2, 0, 0, 0, 0xc3, 0xa9]);
  });

  it("reads arrays of decimal literals through the fast path exactly as the general one", () => {
    const values = Array.from({ length: 3000 }, (_, i) => Math.cos(i) * 10 ** ((i % 30) - 15));
    const text = JSON.stringify(values).replace(/(?<=[[,])(-?\d+)(?=[,\]])/g, "$1.0");
    const fast = data(text);
    // With one integer literal in the array, the general path reads it.
    const general = data(text.replace(/^\[[^,]*,/, "[7,"));
    const fp32 = (bytes: Uint8Array) =>
      Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
    expect(fp32(tensorFromJson("X", "FP32", 3000, fast))).toEqual(Array.from(Float32Array.from(values)));
    expect(fp32(tensorFromJson("X", "FP32", 3000, general)).slice(1)).toEqual(
      Array.from(Float32Array.from(values)).slice(1),
    );
    const fp64 = tensorFromJson("X", "FP64", 6000, data(`[${text},${text}]`)).subarray(3000 * 8);
    expect(Array.from(new Float64Array(fp64.buffer, fp64.byteOffset, 3000))).toEqual(values);
    // Spaces, exponents and nesting; the count checks hold.
    expect(fp32(tensorFromJson("X", "FP32", 4, data("[ [ 0.5 , 2e0 ] , [-1.5E+1,\n 2.5e-1 ] ]")))).toEqual([
      0.5, 2, -15, 0.25,
    ]);
    expect(error(() => tensorFromJson("X", "FP32", 3, data("[0.5,1.5]"))).message).toBe(
      "Failed to parse 'data' field: shape does not match true shape",
    );
    expect(error(() => tensorFromJson("X", "FP32", 1, data("[0.5,1.5]"))).message).toBe(
      "Unable to parse 'data': Shape does not match true shape of 'data' field",
    );
    // Errors are the general parser's, offsets included.
    expect(() => data("[0.5,1e400]")).toThrow("Number too big to be stored in double. at 5");
    expect(() => data("[0.5,01.5]")).toThrow("Missing a comma or ']' after an array element. at 6");
    expect(() => data("[0.5,")).toThrow("Invalid value. at 5");
    // Every other reader sees the literals as the decimals they are.
    expect(asArray(data("[1.0,2.5]"))).toEqual([new JsonFloat(1), new JsonFloat(2.5)]);
  });

  it("answers type mismatches and count mismatches with Triton's 500s", () => {
    const cases: [string, string, number, string, string][] = [
      ["INT32", "[1.5]", 1, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer", ""],
      ["INT32", "[1.0]", 1, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer", ""],
      [
        "UINT8",
        "[-1]",
        1,
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
        "",
      ],
      ["BOOL", "[1]", 1, "Unable to parse 'data': attempt to access JSON non-boolean as boolean", ""],
      ["FP32", '["1"]', 1, "Unable to parse 'data': attempt to access JSON non-number as double", ""],
      [
        "INT64",
        "[18446744073709551615]",
        1,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        "",
      ],
      ["BYTES", "[1]", 1, "Unable to parse JSON bytes array: attempt to access JSON non-string as string", ""],
      ["INT32", "[1,2,3]", 2, "Unable to parse 'data': Shape does not match true shape of 'data' field", ""],
      ["INT32", "[1]", 2, "Failed to parse 'data' field: shape does not match true shape", ""],
    ];
    for (const [type, source, count, message] of cases) {
      expect(
        error(() => tensorFromJson("X", type, count, data(source))),
        `${type} ${source}`,
      ).toEqual({
        status: 500,
        message,
      });
    }
  });

  it("never allocates for a shape the data cannot fill", () => {
    expect(error(() => tensorFromJson("X", "FP64", 2 ** 40, data("[1,2]"))).message).toBe(
      "Failed to parse 'data' field: shape does not match true shape",
    );
  });

  it("refuses FP16, BF16 and unknown datatypes with 400", () => {
    expect(error(() => tensorFromJson("X", "BF16", 1, data("[1]")))).toEqual({
      status: 400,
      message: "receiving BF16 data via JSON is not supported. Please use the binary data format for input X",
    });
    expect(error(() => tensorFromJson("X", "FP8", 1, data("[1]"), "r1")).status).toBe(400);
  });
});

describe("JSON parsing (rapidjson's behaviour)", () => {
  it("tells integer literals from decimals and keeps 64-bit integers exact", () => {
    expect(json("[1, -0, 1.0, 1e2, 9007199254740993, -9223372036854775808, 18446744073709551616]")).toEqual([
      1,
      0,
      new JsonFloat(1),
      new JsonFloat(100),
      9007199254740993n,
      -(2n ** 63n),
      new JsonFloat(2 ** 64),
    ]);
  });

  it("reads strings with escapes, surrogate pairs and UTF-8; objects keep the first of duplicate keys", () => {
    expect(json('"a\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00é"')).toBe('a"\\/\b\f\n\r\té😀é');
    expect(json('{"a":1,"a":2,"b":{}}')).toEqual(
      new Map<string, JsonValue>([
        ["a", 1],
        ["b", new Map()],
      ]),
    );
  });

  it("reports rapidjson's messages and offsets", () => {
    const cases: [string, string][] = [
      ["", "The document is empty. at 0"],
      ["  ", "The document is empty. at 2"],
      ["{", "Missing a name for object member. at 1"],
      ['{"a" 1}', "Missing a colon after a name of object member. at 5"],
      ['{"a":1 "b"}', "Missing a comma or '}' after an object member. at 7"],
      ["[1 2]", "Missing a comma or ']' after an array element. at 3"],
      ['{"a":}', "Invalid value. at 5"],
      ["nul", "Invalid value. at 0"],
      ["[1.]", "Miss fraction part in number. at 3"],
      ["[1e]", "Miss exponent in number. at 3"],
      ['"abc', "Missing a closing quotation mark in string. at 4"],
      ['"\\x"', "Invalid escape character in string. at 1"],
      ['"\\u12G4"', "Incorrect hex digit after \\u escape in string. at 5"],
      ['"\\ud800x"', "The surrogate pair in string is invalid. at 7"],
      ['"a\nb"', "Invalid encoding in string. at 2"],
      ["1e999", "Number too big to be stored in double. at 0"],
      ["{} x", "The document root must not be followed by other values. at 3"],
      // Past 100 levels the reader keeps no values but gives the same errors, at any depth.
      ["[".repeat(101), "Invalid value. at 101"],
      [`${"[".repeat(150)}1 2${"]".repeat(150)}`, "Missing a comma or ']' after an array element. at 152"],
      [`${"[".repeat(150)}{"a" 1}${"]".repeat(150)}`, "Missing a colon after a name of object member. at 155"],
      [`${"[".repeat(150)}{1}${"]".repeat(150)}`, "Missing a name for object member. at 151"],
      [`${"[".repeat(150)}]`, "Missing a comma or ']' after an array element. at 151"],
    ];
    for (const [source, message] of cases) expect(() => json(source), source).toThrow(message);
    expect(() => json(`${"[".repeat(100)}${"]".repeat(100)}`)).not.toThrow();
    const deep = 250_000;
    const tooDeep = json(`{"ready":${"[".repeat(deep)}{"x":[1,"s",{}]}${"]".repeat(deep)},"b":true}`) as Map<
      string,
      unknown
    >;
    // The root object is level 1: `ready` keeps 99 levels of arrays, the rest is one JsonTooDeep.
    let value = tooDeep.get("ready");
    let levels = 0;
    for (; Array.isArray(value); levels++) value = value[0];
    expect([levels, value]).toEqual([99, expect.any(JsonTooDeep)]);
    expect(tooDeep.get("b")).toBe(true);
  });
});

describe("Content-Encoding and Accept-Encoding", () => {
  it("reads request encodings as Triton does", () => {
    expect(requestEncoding(undefined)).toBe("identity");
    expect(requestEncoding("identity")).toBe("identity");
    expect(requestEncoding("gzip")).toBe("gzip");
    expect(requestEncoding("deflate")).toBe("deflate");
    expect(() => requestEncoding("GZIP")).toThrow("Unsupported compression type");
  });

  it("picks the reply encoding: highest q, first on a tie, q=0 never", () => {
    const cases: [string | undefined, string][] = [
      [undefined, "identity"],
      ["gzip", "gzip"],
      ["deflate, gzip", "deflate"],
      ["gzip;q=0.2, deflate;q=0.3, identity;q=0.1", "deflate"],
      ["gzip;q=0", "identity"],
      ["br, *;q=1", "identity"],
      ["  gzip;q=1.0", "gzip"],
      ["gzip ;q=1", "identity"],
      ["gzip;q=abc, deflate;q=0.1", "deflate"],
    ];
    for (const [header, expected] of cases) expect(responseEncoding(header), String(header)).toBe(expected);
  });
});
