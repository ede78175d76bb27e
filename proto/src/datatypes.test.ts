import { describe, expect, it } from "vitest";
import { ELEMENT_TYPES, elementType } from "./datatypes.js";
import { DataType, dataTypeFromProtocol, dataTypeToProtocol } from "./index.js";

describe("datatype table (PROTOCOL.md §3.2)", () => {
  it("gives every datatype's element size and typed array", () => {
    const layout = Object.fromEntries(ELEMENT_TYPES.map((t) => [t.name, [t.byteSize, t.array]]));
    expect(layout).toEqual({
      BOOL: [1, Uint8Array],
      UINT8: [1, Uint8Array],
      UINT16: [2, Uint16Array],
      UINT32: [4, Uint32Array],
      UINT64: [8, BigUint64Array],
      INT8: [1, Int8Array],
      INT16: [2, Int16Array],
      INT32: [4, Int32Array],
      INT64: [8, BigInt64Array],
      FP16: [2, Uint16Array],
      FP32: [4, Float32Array],
      FP64: [8, Float64Array],
      BF16: [2, Uint16Array],
      BYTES: [0, undefined],
    });
    for (const t of ELEMENT_TYPES) if (t.array) expect(t.array.BYTES_PER_ELEMENT).toBe(t.byteSize);
  });

  it("finds datatypes by their exact name only", () => {
    expect(elementType("FP32")?.byteSize).toBe(4);
    expect(elementType("fp32")).toBeUndefined();
    expect(elementType("STRING")).toBeUndefined();
    expect(elementType("")).toBeUndefined();
  });

  it("names a config DataType for each, TYPE_STRING for BYTES", () => {
    for (const t of ELEMENT_TYPES) {
      expect(t.configName).toBe(t.name === "BYTES" ? "TYPE_STRING" : `TYPE_${t.name}`);
      expect(DataType[t.configName]).toBeTypeOf("number");
    }
  });
});

describe("config DataType ↔ protocol name", () => {
  const valid = Object.values(DataType).filter(
    (v): v is DataType => typeof v === "number" && v !== DataType.TYPE_INVALID,
  );

  it("covers every config type, both ways", () => {
    expect(valid).toHaveLength(ELEMENT_TYPES.length);
    for (const type of valid) expect(dataTypeFromProtocol(dataTypeToProtocol(type))).toBe(type);
    expect(dataTypeToProtocol(DataType.TYPE_STRING)).toBe("BYTES");
    expect(dataTypeFromProtocol("BYTES")).toBe(DataType.TYPE_STRING);
  });

  it("gives INVALID / TYPE_INVALID for names and values it does not know", () => {
    expect(dataTypeToProtocol(DataType.TYPE_INVALID)).toBe("INVALID");
    expect(dataTypeToProtocol(99 as DataType)).toBe("INVALID");
    expect(dataTypeFromProtocol("STRING")).toBe(DataType.TYPE_INVALID);
    expect(dataTypeFromProtocol("fp32")).toBe(DataType.TYPE_INVALID);
  });
});
