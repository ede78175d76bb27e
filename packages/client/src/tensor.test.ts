import { describe, expect, it } from "vitest";
import { OutputTensor, tensor } from "./tensor.js";

describe("tensor's integer constructors", () => {
  it("refuse values out of the datatype's range instead of wrapping them", () => {
    expect(() => tensor.int32([3], [1, 2 ** 31, 3])).toThrow(
      new RangeError("INT32 value 2147483648 at index 1 is out of range [-2147483648, 2147483647]"),
    );
    expect(() => tensor.uint8([2], [255, 256])).toThrow("UINT8 value 256 at index 1 is out of range [0, 255]");
    expect(() => tensor.uint8([1], [-1])).toThrow("UINT8 value -1 at index 0 is out of range [0, 255]");
    expect(() => tensor.int8([1], [128])).toThrow(RangeError);
    expect(() => tensor.uint16([1], [65536])).toThrow(RangeError);
    expect(() => tensor.int16([1], [-32769])).toThrow(RangeError);
    expect(() => tensor.uint32([1], [2 ** 32])).toThrow(RangeError);
    expect(() => tensor.int64([1], [2n ** 63n])).toThrow(
      "INT64 value 9223372036854775808 at index 0 is out of range [-9223372036854775808, 9223372036854775807]",
    );
    expect(() => tensor.uint64([1], [-1n])).toThrow(RangeError);
  });

  it("refuse values that are not integers instead of truncating them", () => {
    expect(() => tensor.uint8([1], [3.7])).toThrow(new RangeError("UINT8 value 3.7 at index 0 is not an integer"));
    expect(() => tensor.int32([2], [1, Number.NaN])).toThrow("INT32 value NaN at index 1 is not an integer");
    expect(() => tensor.int64([1], [Number.POSITIVE_INFINITY])).toThrow(
      "INT64 value Infinity at index 0 is not an integer",
    );
    expect(() => tensor.int32([1], ["7"] as unknown as number[])).toThrow(
      'INT32 value "7" at index 0 is not an integer',
    );
    // A typed array of another kind is checked the same way.
    expect(() => tensor.int8([1], Float64Array.of(0.5))).toThrow(RangeError);
  });

  it("take the extremes, numbers or bigints, exactly", () => {
    const int32 = new OutputTensor("", "INT32", [2], tensor.int32([2], [-(2 ** 31), 2n ** 31n - 1n]).data);
    expect([...int32.int32()]).toEqual([-(2 ** 31), 2 ** 31 - 1]);
    const uint64 = new OutputTensor("", "UINT64", [2], tensor.uint64([2], [2 ** 53, 2n ** 64n - 1n]).data);
    expect([...uint64.uint64()]).toEqual([2n ** 53n, 2n ** 64n - 1n]);
    expect([...tensor.uint8([2], [0, 255]).data]).toEqual([0, 255]);
  });

  it("use a typed array of the datatype's own kind as it is, and leave floats to IEEE rounding", () => {
    const values = Int32Array.of(1, 2);
    expect(tensor.int32([2], values).data.buffer).toBe(values.buffer);
    expect([...new Float32Array(tensor.fp32([1], [1e39]).data.buffer)]).toEqual([Number.POSITIVE_INFINITY]);
  });
});

describe("an output in shared memory", () => {
  it("names its region when read, and reads as usual without one", () => {
    const placed = new OutputTensor("OUT", "BYTES", [1], new Uint8Array(0), { region: "r", byteSize: 8 });
    expect(() => placed.strings()).toThrow(
      "output 'OUT' was written to shared-memory region 'r' (offset 0, 8 bytes), not into the response",
    );
    const carried = new OutputTensor("OUT", "INT32", [1], tensor.int32([1], [7]).data);
    expect([...carried.int32()]).toEqual([7]);
  });
});
