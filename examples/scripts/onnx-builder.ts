// Small helpers for writing ONNX models (ModelProto bytes) with onnx-buf, used by generate-models.ts.
// Every model is opset 17 of the default domain, IR version 8. Nothing here reads the clock or the
// environment, so the same arguments always give the same bytes.
import { create, toBinary } from "@bufbuild/protobuf";
import {
  AttributeProto_AttributeType,
  ModelProtoSchema,
  type NodeProto,
  NodeProtoSchema,
  type TensorProto,
  TensorProto_DataType,
  TensorProtoSchema,
  type ValueInfoProto,
  ValueInfoProtoSchema,
} from "onnx-buf";

export { TensorProto_DataType as OnnxType };

/** A graph input or output. A number is a fixed dimension, a string a named (symbolic) one such as "batch". */
export function tensorInfo(name: string, elemType: TensorProto_DataType, dims: (number | string)[]): ValueInfoProto {
  return create(ValueInfoProtoSchema, {
    name,
    type: {
      value: {
        case: "tensorType",
        value: {
          elemType,
          shape: {
            dim: dims.map((d) =>
              typeof d === "number"
                ? { value: { case: "dimValue" as const, value: BigInt(d) } }
                : { value: { case: "dimParam" as const, value: d } },
            ),
          },
        },
      },
    },
  });
}

/** One operator. Attributes are integers (Cast's `to`, Softmax's `axis`, Gemm's `transB`). */
export function node(
  opType: string,
  inputs: string[],
  outputs: string[],
  attributes: Record<string, number> = {},
): NodeProto {
  return create(NodeProtoSchema, {
    name: `${opType}_${outputs.join("_")}`,
    opType,
    input: inputs,
    output: outputs,
    attribute: Object.entries(attributes).map(([name, i]) => ({
      name,
      type: AttributeProto_AttributeType.INT,
      i: BigInt(i),
    })),
  });
}

/** A float32 weight, stored as little-endian raw_data whatever the host's byte order. */
export function initializer(name: string, dims: number[], values: Float32Array): TensorProto {
  const count = dims.reduce((a, d) => a * d, 1);
  if (values.length !== count) throw new Error(`${name}: ${values.length} values for dims [${dims}]`);
  const raw = new Uint8Array(new ArrayBuffer(count * 4));
  const view = new DataView(raw.buffer);
  for (const [i, v] of values.entries()) view.setFloat32(i * 4, v, true);
  return create(TensorProtoSchema, {
    name,
    dataType: TensorProto_DataType.FLOAT,
    dims: dims.map((d) => BigInt(d)),
    rawData: raw,
  });
}

export interface GraphSpec {
  name: string;
  /** What the model computes; becomes the model's doc_string. */
  doc: string;
  inputs: ValueInfoProto[];
  outputs: ValueInfoProto[];
  nodes: NodeProto[];
  initializers?: TensorProto[];
}

/** Serialise a model: IR version 8, opset 17 (domain ""), one graph. */
export function model(spec: GraphSpec): Uint8Array {
  return toBinary(
    ModelProtoSchema,
    create(ModelProtoSchema, {
      irVersion: 8n,
      producerName: "galley-examples",
      producerVersion: "1",
      docString: spec.doc,
      opsetImport: [{ domain: "", version: 17n }],
      graph: {
        name: spec.name,
        node: spec.nodes,
        input: spec.inputs,
        output: spec.outputs,
        initializer: spec.initializers ?? [],
      },
    }),
  );
}

/** mulberry32: a tiny seeded PRNG giving uniform numbers in [0, 1). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
