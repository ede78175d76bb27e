import { DataType } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { dataTypeFromProtocol, dataTypeToProtocol } from "./data-type.js";

describe("datatype vocabulary (PROTOCOL.md §3.2)", () => {
  const valid = Object.values(DataType).filter(
    (v): v is DataType => typeof v === "number" && v !== DataType.TYPE_INVALID,
  );

  it("maps every config type to the protocol name without TYPE_, except TYPE_STRING", () => {
    for (const type of valid) {
      const expected = type === DataType.TYPE_STRING ? "BYTES" : DataType[type].replace(/^TYPE_/, "");
      expect(dataTypeToProtocol(type)).toBe(expected);
    }
    expect(valid).toHaveLength(14);
  });

  it("round-trips every protocol name", () => {
    for (const type of valid) expect(dataTypeFromProtocol(dataTypeToProtocol(type))).toBe(type);
  });

  it("rejects unknown and wrongly cased names", () => {
    expect(dataTypeFromProtocol("STRING")).toBe(DataType.TYPE_INVALID);
    expect(dataTypeFromProtocol("fp32")).toBe(DataType.TYPE_INVALID);
    expect(dataTypeFromProtocol("")).toBe(DataType.TYPE_INVALID);
    expect(dataTypeToProtocol(DataType.TYPE_INVALID)).toBe("INVALID");
  });
});
