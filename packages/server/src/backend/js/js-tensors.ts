// Tensors inside a scripted model's worker: wire tensors wrapped with typed accessors (views, no
// copies), and what a model returns turned back into wire tensors.
import { elementType as datatype } from "../../core/element-types.js";
import { bytesElements, elementCount, encodeBytesElements } from "../../core/tensor.js";
import type { DataType, InputTensor, OutputTensor } from "../../model/api.js";
import type { WireError, WireTensor } from "./js-messages.js";

const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const encoder = new TextEncoder();

/** A received tensor with typed accessors over the same bytes. */
export function wrapTensor(wire: WireTensor): InputTensor {
  const info = datatype(wire.datatype);
  return {
    name: wire.name,
    datatype: wire.datatype as DataType,
    shape: wire.shape,
    data: wire.data,
    typed() {
      const ArrayType = info?.array;
      if (!info || !ArrayType) throw new Error(`${wire.datatype} tensor '${wire.name}' has no typed-array form`);
      const { data } = wire;
      const count = data.byteLength / info.byteSize;
      if (data.byteOffset % info.byteSize === 0)
        return new ArrayType(data.buffer as ArrayBuffer, data.byteOffset, count);
      // Unaligned bytes (a slice of a larger message) cannot be viewed: copy once.
      return new ArrayType(new Uint8Array(data).buffer, 0, count);
    },
    bytes() {
      if (wire.datatype !== "BYTES") throw new Error(`tensor '${wire.name}' is ${wire.datatype}, not BYTES`);
      return bytesElements(wire.data);
    },
    strings() {
      return this.bytes().map((e) => utf8.decode(e));
    },
  };
}

/** What a model returned as a wire tensor, checked against its shape. */
export function toWireTensor(tensor: OutputTensor): WireTensor {
  const info = datatype(tensor.datatype);
  if (!info) throw new Error(`output '${tensor.name}' has unknown datatype '${tensor.datatype}'`);
  const shape = [...tensor.shape];
  const count = elementCount(shape);
  const source = tensor.data;
  let data: Uint8Array;
  if (Array.isArray(source)) {
    if (info.name !== "BYTES")
      throw new Error(`output '${tensor.name}' is ${info.name}: give a typed array, not a list`);
    if (source.length !== count) {
      throw new Error(`output '${tensor.name}' has ${source.length} elements, its shape [${shape}] needs ${count}`);
    }
    data = encodeBytesElements(source.map((e) => (typeof e === "string" ? encoder.encode(e) : e)));
  } else {
    const view = source as ArrayBufferView;
    data = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    if (info.name !== "BYTES" && data.byteLength !== count * info.byteSize) {
      throw new Error(
        `output '${tensor.name}' has ${data.byteLength} bytes, its shape [${shape}] of ${info.name} needs ${count * info.byteSize}`,
      );
    }
  }
  return { name: tensor.name, datatype: info.name, shape, data };
}

/** Anything thrown (or given as a response's error) as a wire error with a Triton code. */
export function wireError(error: unknown): WireError {
  if (typeof error === "string") return { message: error };
  const message = (error as Error)?.message ?? String(error);
  const code = (error as { code?: unknown })?.code;
  return typeof code === "string" ? { message, code } : { message };
}
