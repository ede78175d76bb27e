import { DataType } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { OnnxType, onnxModel } from "../test/onnx-model.js";
import { OnnxModelError, readOnnxModelIO } from "./onnx-io.js";

describe("readOnnxModelIO", () => {
  it("reads names, datatypes and dims; named and missing dims become -1; initializers are not inputs", () => {
    const bytes = onnxModel({
      inputs: [
        { name: "INPUT0", type: OnnxType.INT32, dims: ["batch", 16] },
        { name: "TEXT", type: OnnxType.STRING, dims: [-1] },
        { name: "HALF", type: OnnxType.FLOAT16, dims: [2, 3] },
      ],
      outputs: [{ name: "OUTPUT0", type: OnnxType.FLOAT, dims: ["batch", 16] }],
      initializers: [{ name: "weight", type: OnnxType.FLOAT, dims: [16] }],
    });
    expect(readOnnxModelIO(bytes)).toEqual({
      inputs: [
        { name: "INPUT0", dataType: DataType.TYPE_INT32, dims: [-1n, 16n] },
        { name: "TEXT", dataType: DataType.TYPE_STRING, dims: [-1n] },
        { name: "HALF", dataType: DataType.TYPE_FP16, dims: [2n, 3n] },
      ],
      outputs: [{ name: "OUTPUT0", dataType: DataType.TYPE_FP32, dims: [-1n, 16n] }],
    });
  });

  it("reads a scalar as empty dims", () => {
    const io = readOnnxModelIO(onnxModel({ inputs: [{ name: "s", type: OnnxType.DOUBLE, dims: [] }], outputs: [] }));
    expect(io.inputs).toEqual([{ name: "s", dataType: DataType.TYPE_FP64, dims: [] }]);
  });

  it("rejects non-ONNX bytes and types Triton has no datatype for", () => {
    expect(() => readOnnxModelIO(new Uint8Array([0xff, 0xff, 0xff]))).toThrow(OnnxModelError);
    expect(() => readOnnxModelIO(new Uint8Array())).toThrow(/has no graph/);
    const complex = onnxModel({ inputs: [{ name: "c", type: OnnxType.COMPLEX64, dims: [1] }], outputs: [] });
    expect(() => readOnnxModelIO(complex)).toThrow(/unsupported datatype COMPLEX64 for 'c'/);
  });
});
