import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { fromText, toText } from "@bufbuild/protobuf/txtpb";
import { describe, expect, it } from "vitest";
import { ModelConfigSchema, ModelInferRequestSchema } from "../src/index.js";

describe("strings keep a leading U+FEFF (protobuf-es would drop it as a byte-order mark)", () => {
  it("in the binary wire", () => {
    const request = create(ModelInferRequestSchema, { modelName: "\ufeffsimple", id: "\ufeff" });
    expect(fromBinary(ModelInferRequestSchema, toBinary(ModelInferRequestSchema, request))).toMatchObject({
      modelName: "\ufeffsimple",
      id: "\ufeff",
    });
  });

  it("in the text format", () => {
    const config = create(ModelConfigSchema, { name: "\ufeff", parameters: { "\ufeffk": { stringValue: "\ufeffv" } } });
    const back = fromText(ModelConfigSchema, toText(ModelConfigSchema, config));
    expect(back.name).toBe("\ufeff");
    expect(back.parameters["\ufeffk"]?.stringValue).toBe("\ufeffv");
  });

  it("still rejects invalid UTF-8 in strict decoding of string fields", () => {
    // field 1 (model_name), length 2, bytes 0xff 0xfe: not UTF-8
    expect(() => fromBinary(ModelInferRequestSchema, new Uint8Array([0x0a, 2, 0xff, 0xfe]))).toThrow();
  });
});
