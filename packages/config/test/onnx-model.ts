// Builds real ONNX model files (ModelProto bytes) for tests, with onnx-buf.
import { create, toBinary } from "@bufbuild/protobuf";
import { ModelProtoSchema, TensorProto_DataType, type ValueInfoProto, ValueInfoProtoSchema } from "onnx-buf";

export { TensorProto_DataType as OnnxType };

export interface TensorSpec {
  name: string;
  type: TensorProto_DataType;
  /** A number is a fixed size, a string a named (symbolic) dimension; undefined leaves the shape out. */
  dims?: (number | string)[];
}

export interface ModelSpec {
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  nodes?: { op: string; inputs: string[]; outputs: string[] }[];
  /** Names of weights: listed as initializers and, as older exporters do, as graph inputs. */
  initializers?: TensorSpec[];
}

function valueInfo(t: TensorSpec): ValueInfoProto {
  return create(ValueInfoProtoSchema, {
    name: t.name,
    type: {
      value: {
        case: "tensorType",
        value: {
          elemType: t.type,
          ...(t.dims
            ? {
                shape: {
                  dim: t.dims.map((d) =>
                    typeof d === "number"
                      ? { value: { case: "dimValue" as const, value: BigInt(d) } }
                      : { value: { case: "dimParam" as const, value: d } },
                  ),
                },
              }
            : {}),
        },
      },
    },
  });
}

export function onnxModel(spec: ModelSpec): Uint8Array {
  const initializers = spec.initializers ?? [];
  return toBinary(
    ModelProtoSchema,
    create(ModelProtoSchema, {
      irVersion: 8n,
      producerName: "galley-tests",
      opsetImport: [{ domain: "", version: 17n }],
      graph: {
        name: "test",
        node: (spec.nodes ?? []).map((n) => ({ opType: n.op, input: n.inputs, output: n.outputs })),
        input: [...spec.inputs, ...initializers].map(valueInfo),
        output: spec.outputs.map(valueInfo),
        initializer: initializers.map((t) => ({
          name: t.name,
          dataType: t.type,
          dims: (t.dims ?? []).map((d) => BigInt(d)),
          floatData: new Array(Number((t.dims ?? []).reduce<number>((a, d) => a * Number(d), 1))).fill(0),
        })),
      },
    }),
  );
}
