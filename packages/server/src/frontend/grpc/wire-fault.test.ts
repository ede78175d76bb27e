import { create, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { describeWireFault, findWireFault } from "./wire-fault.js";

const encode = (init: Parameters<typeof create<typeof ModelInferRequestSchema>>[1]) =>
  toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, init));

const fault = (bytes: Uint8Array) => describeWireFault(findWireFault(ModelInferRequestSchema, bytes));

describe("findWireFault", () => {
  it("finds nothing wrong in a valid encoding", () => {
    const bytes = encode({
      modelName: "m",
      parameters: { sequence_id: { parameterChoice: { case: "int64Param", value: 3n } } },
      inputs: [{ name: "X", datatype: "FP32", shape: [2n], contents: { fp32Contents: [1, 2] } }],
      rawInputContents: [new Uint8Array([1, 2, 3])],
    });
    expect(findWireFault(ModelInferRequestSchema, bytes)).toBeUndefined();
  });

  it("names the innermost field that is cut short", () => {
    const bytes = encode({ inputs: [{ name: "X", shape: [4n], contents: { fp32Contents: [1, 2, 3, 4] } }] });
    expect(fault(bytes.subarray(0, bytes.length - 6))).toBe("field 'inputs.contents.fp32_contents' is cut short");
    const raw = encode({ modelName: "m", rawInputContents: [new Uint8Array(100)] });
    expect(fault(raw.subarray(0, 50))).toBe("field 'raw_input_contents' is cut short");
  });

  it("names a map value's field, a wrong wire type, bad UTF-8 and a bad tag", () => {
    const map = encode({ parameters: { p: { parameterChoice: { case: "stringParam", value: "hello" } } } });
    expect(fault(map.subarray(0, map.length - 2))).toBe("field 'parameters.string_param' is cut short");
    // model_name (field 1) written as a varint.
    expect(fault(new Uint8Array([0x08, 0x01]))).toBe("field 'model_name' has the wrong wire type");
    expect(fault(new Uint8Array([0x0a, 0x02, 0xc3, 0x28]))).toBe("field 'model_name' is not valid UTF-8");
    expect(fault(new Uint8Array([0x00]))).toBe("the message has an invalid field tag");
    expect(fault(new Uint8Array([0xff]))).toBe("the message has an invalid field tag");
  });

  it("skips unknown fields, groups included, and says when one is cut short", () => {
    expect(
      findWireFault(ModelInferRequestSchema, new Uint8Array([0x78, 0x05, 0x83, 0x01, 0x08, 0x01, 0x84, 0x01])),
    ).toBeUndefined();
    expect(fault(new Uint8Array([0x7d, 0x01, 0x02]))).toBe("field '#15' is cut short");
  });
});
