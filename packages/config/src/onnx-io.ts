import { stat } from "node:fs/promises";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { DataType, type ModelConfig } from "@galley/proto";
import { ModelProtoSchema, TensorProto_DataType, type ValueInfoProto } from "onnx-buf";

/** One input or output of a model, in config vocabulary: -1 marks a dimension without a fixed size. */
export interface ModelTensorInfo {
  name: string;
  dataType: DataType;
  /** Empty for a scalar. */
  dims: bigint[];
}

/** A model's inputs and outputs, as a backend reports them for auto-complete. */
export interface ModelIO {
  inputs: ModelTensorInfo[];
  outputs: ModelTensorInfo[];
}

/** An ONNX model whose inputs or outputs cannot be described in config vocabulary. */
export class OnnxModelError extends Error {
  override name = "OnnxModelError";
}

const ONNX_TO_TRITON = new Map<number, DataType>([
  [TensorProto_DataType.BOOL, DataType.TYPE_BOOL],
  [TensorProto_DataType.UINT8, DataType.TYPE_UINT8],
  [TensorProto_DataType.UINT16, DataType.TYPE_UINT16],
  [TensorProto_DataType.UINT32, DataType.TYPE_UINT32],
  [TensorProto_DataType.UINT64, DataType.TYPE_UINT64],
  [TensorProto_DataType.INT8, DataType.TYPE_INT8],
  [TensorProto_DataType.INT16, DataType.TYPE_INT16],
  [TensorProto_DataType.INT32, DataType.TYPE_INT32],
  [TensorProto_DataType.INT64, DataType.TYPE_INT64],
  [TensorProto_DataType.FLOAT16, DataType.TYPE_FP16],
  [TensorProto_DataType.FLOAT, DataType.TYPE_FP32],
  [TensorProto_DataType.DOUBLE, DataType.TYPE_FP64],
  [TensorProto_DataType.STRING, DataType.TYPE_STRING],
  [TensorProto_DataType.BFLOAT16, DataType.TYPE_BF16],
]);

/**
 * Read the graph inputs and outputs of an ONNX model file (`model.onnx` bytes). Initializers
 * listed as graph inputs (older exporters do this) are not inputs. A dimension given by a name
 * (`dim_param`) or not given at all becomes -1.
 *
 * @throws {@link OnnxModelError} for bytes that are not an ONNX model, or a tensor type Triton
 * has no datatype for.
 */
export function readOnnxModelIO(bytes: Uint8Array): ModelIO {
  let model: ReturnType<typeof fromBinary<typeof ModelProtoSchema>>;
  try {
    model = fromBinary(ModelProtoSchema, bytes);
  } catch (error) {
    throw new OnnxModelError(`not an ONNX model: ${(error as Error).message}`);
  }
  const graph = model.graph;
  if (!graph) throw new OnnxModelError("not an ONNX model: it has no graph");
  const initializers = new Set(graph.initializer.map((t) => t.name));
  return {
    inputs: graph.input.filter((v) => !initializers.has(v.name)).map(describe),
    outputs: graph.output.map(describe),
  };
}

function describe(value: ValueInfoProto): ModelTensorInfo {
  const type = value.type?.value;
  if (type?.case !== "tensorType") {
    throw new OnnxModelError(
      `'${value.name}' is not a tensor (${type?.case ?? "no type"}); only tensors are supported`,
    );
  }
  const dataType = ONNX_TO_TRITON.get(type.value.elemType);
  if (dataType === undefined) {
    const onnxName = TensorProto_DataType[type.value.elemType] ?? String(type.value.elemType);
    throw new OnnxModelError(`unsupported datatype ${onnxName} for '${value.name}'`);
  }
  const dims = (type.value.shape?.dim ?? []).map((d) => (d.value.case === "dimValue" ? d.value.value : -1n));
  return { name: value.name, dataType, dims };
}

/**
 * Where a version's ONNX model is: `<model>/<version>/<default_model_filename or model.onnx>`,
 * or `model.onnx` inside it when that is a folder (as Triton's ONNX Runtime backend looks).
 */
export async function findOnnxModelFile(modelPath: string, version: number, config: ModelConfig): Promise<string> {
  const path = join(modelPath, String(version), config.defaultModelFilename || "model.onnx");
  const isFolder = await stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
  return isFolder ? join(path, "model.onnx") : path;
}

/** The message for a model file that is not there, as Triton's ONNX Runtime backend words it. */
export function missingOnnxModelMessage(path: string, config: ModelConfig): string {
  return `unable to find '${path}' for model instance '${config.name}'`;
}
