// Tensors between the protocol's datatypes and onnxruntime-node's: numeric data moves to the
// worker as typed-array views; BYTES become ONNX string tensors (text) and back.
import {
  type DataType,
  dataTypeFromProtocol,
  decodeBytesElements,
  encodeBytesElements,
  type ModelOutput,
} from "@galley/proto";
import { datatype } from "../../base/datatype.js";
import { InferenceError } from "../../base/errors.js";
import type { Tensor } from "../../base/tensor.js";
import { configOutputShape, workerView } from "../batch-io.js";
import type { OrtType, ValueInfo, WireTensor } from "./ort-messages.js";

/** onnxruntime-node's type name per protocol datatype. */
export const ORT_TYPES: Readonly<Record<string, OrtType>> = {
  BOOL: "bool",
  UINT8: "uint8",
  INT8: "int8",
  UINT16: "uint16",
  INT16: "int16",
  UINT32: "uint32",
  INT32: "int32",
  UINT64: "uint64",
  INT64: "int64",
  FP16: "float16",
  FP32: "float32",
  FP64: "float64",
  BYTES: "string",
};

/** The protocol datatype name per onnxruntime-node type name (read for every output). */
const PROTOCOL_OF_ORT: ReadonlyMap<string, string> = new Map(
  Object.entries(ORT_TYPES).map(([name, type]) => [type, name]),
);

/** The config datatype per onnxruntime-node type name (for auto-complete). */
export const FROM_ORT: Readonly<Record<string, DataType>> = Object.fromEntries(
  Object.entries(ORT_TYPES).map(([name, type]) => [type, dataTypeFromProtocol(name)]),
);

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * An input with the session's `dims`. For a worker (`transfer` given), the buffer it moves with is
 * added to `transfer`; for a run on this thread (no `transfer`), the tensor's own bytes are viewed
 * where they are aligned and not shared memory (which onnxruntime-node refuses), else copied once.
 */
export function toOrtTensor(tensor: Tensor, dims: number[], transfer?: Set<ArrayBuffer>): WireTensor {
  const type = ORT_TYPES[tensor.datatype];
  if (!type) throw new InferenceError("ORT_UNSUPPORTED_DATATYPE", { datatype: tensor.datatype, input: tensor.name });
  if (type !== "string") {
    if (!transfer) return { name: tensor.name, type, dims, data: localView(tensor) };
    const { view, transfer: buffer } = workerView(tensor);
    transfer.add(buffer);
    return { name: tensor.name, type, dims, data: view };
  }
  const elements = decodeBytesElements(tensor.data);
  try {
    return { name: tensor.name, type, dims, data: elements.map((e) => utf8.decode(e)) };
  } catch (error) {
    throw new InferenceError("ORT_BYTES_NOT_UTF8", { input: tensor.name }, { cause: error });
  }
}

function localView(tensor: Tensor): ArrayBufferView {
  const info = datatype(tensor.datatype);
  const ArrayType = info?.array;
  if (!info || !ArrayType) throw new InferenceError("TENSOR_NO_TYPED_ARRAY", { datatype: tensor.datatype });
  const data = tensor.data;
  const count = data.byteLength / info.byteSize;
  if (data.buffer instanceof ArrayBuffer && data.byteOffset % info.byteSize === 0) {
    return new ArrayType(data.buffer, data.byteOffset, count);
  }
  const own = new Uint8Array(data.byteLength);
  own.set(data);
  return new ArrayType(own.buffer, 0, count);
}

/** Zero-filled inputs ("0" for strings) for warm-up runs: each variable dimension 1; throws for a type it cannot make. */
export function warmupFeeds(inputs: readonly ValueInfo[]): WireTensor[] {
  return inputs.map((input) => {
    const type = input.type as OrtType | undefined;
    const protocol = type && PROTOCOL_OF_ORT.get(type);
    if (!type || !protocol) throw new Error(`no warm-up value for '${input.name}'`);
    const dims = input.shape.map((d) => (typeof d === "number" && d > 0 ? d : 1));
    const count = dims.reduce((a, b) => a * b, 1);
    // "0": text that also parses as a number (models often cast their string inputs).
    if (type === "string") return { name: input.name, type, dims, data: new Array<string>(count).fill("0") };
    const ArrayType = datatype(protocol)?.array;
    if (!ArrayType) throw new Error(`no warm-up value for '${input.name}'`);
    return { name: input.name, type, dims, data: new ArrayType(count) };
  });
}

/** An output from the worker, with the config's shape where the output is reshaped. */
export function fromOrtTensor(wire: WireTensor, spec: ModelOutput | undefined, batching: boolean): Tensor {
  const protocol = PROTOCOL_OF_ORT.get(wire.type) ?? "BYTES";
  const info = datatype(protocol);
  const shape = configOutputShape(wire.dims, spec, batching);
  const data = Array.isArray(wire.data)
    ? encodeBytesElements(wire.data)
    : new Uint8Array(wire.data.buffer, wire.data.byteOffset, wire.data.byteLength);
  return { name: wire.name, datatype: info?.name ?? "BYTES", shape, data, parameters: {}, movable: true };
}
