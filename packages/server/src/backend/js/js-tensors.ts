// Tensors inside a scripted model's worker: wire tensors wrapped with typed accessors (views, no
// copies), and what a model returns turned back into wire tensors.

import { decodeBytesElements, encodeBytesElements } from "@galley/proto/bytes-codec";
import { elementType as datatype } from "@galley/proto/datatypes";
import type { ERRORS } from "../../base/errors.js";
import { elementCount } from "../../base/tensor.js";
import type { DataType, DeviceRef, InputTensor, OutputTensor } from "../../model/api.js";
import type { WireError, WireTensor } from "../scripted/bls-wire.js";

/** The error table's entries this module raises; the worker gets them with `start` (see {@link useErrorTable}). */
export const TENSOR_ERROR_IDS = [
  "JS_TENSOR_NO_TYPED_ARRAY",
  "JS_TENSOR_NOT_BYTES",
  "JS_TENSOR_ON_DEVICE",
  "JS_OUTPUT_UNKNOWN_DATATYPE",
  "JS_OUTPUT_LIST",
  "JS_OUTPUT_ELEMENT_COUNT",
  "JS_OUTPUT_BYTE_SIZE",
  "JS_TENSOR_DIRECT_DEVICE",
] as const;

/** One of {@link TENSOR_ERROR_IDS}. */
export type TensorErrorId = (typeof TENSOR_ERROR_IDS)[number];

/** Those entries of the error table: Triton's code and the message template. */
export type TensorErrorTable = { readonly [K in TensorErrorId]: (typeof ERRORS)[K] };

let table: TensorErrorTable | undefined;

/**
 * The entries of the error table that tensor errors use. The table's module loads the gRPC
 * library, too heavy for every worker's start, so the server sends these few with `start`.
 */
export function useErrorTable(entries: TensorErrorTable): void {
  table = entries;
}

/** An error from the table, as a worker raises it: the formatted message, Triton's code and the id. */
function tensorError(id: TensorErrorId, values: Record<string, string | number>): Error {
  const [code, template] = table?.[id] ?? ["INTERNAL", id];
  const message = template.replace(/\{(\w+)\}/g, (_, key: string) =>
    key in values ? String(values[key]) : `{${key}}`,
  );
  return Object.assign(new Error(message), { code, id, values });
}

const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** A received tensor held on a GPU: no bytes here, accessors that say so. */
function deviceTensor(wire: WireTensor, device: DeviceRef): InputTensor {
  const onDevice = () => tensorError("JS_TENSOR_ON_DEVICE", { tensor: wire.name, device: device.deviceId });
  return {
    name: wire.name,
    datatype: wire.datatype as DataType,
    shape: wire.shape,
    data: wire.data,
    device,
    typed() {
      throw onDevice();
    },
    bytes() {
      throw onDevice();
    },
    strings() {
      throw onDevice();
    },
  };
}

/** A received tensor with typed accessors over the same bytes. */
export function wrapTensor(wire: WireTensor): InputTensor {
  if (wire.device) return deviceTensor(wire, wire.device);
  const info = datatype(wire.datatype);
  return {
    name: wire.name,
    datatype: wire.datatype as DataType,
    shape: wire.shape,
    data: wire.data,
    typed() {
      const ArrayType = info?.array;
      if (!info || !ArrayType)
        throw tensorError("JS_TENSOR_NO_TYPED_ARRAY", { datatype: wire.datatype, tensor: wire.name });
      const { data } = wire;
      const count = data.byteLength / info.byteSize;
      if (data.byteOffset % info.byteSize === 0)
        return new ArrayType(data.buffer as ArrayBuffer, data.byteOffset, count);
      // Unaligned bytes (a slice of a larger message) cannot be viewed: copy once.
      return new ArrayType(new Uint8Array(data).buffer, 0, count);
    },
    bytes() {
      if (wire.datatype !== "BYTES")
        throw tensorError("JS_TENSOR_NOT_BYTES", { tensor: wire.name, datatype: wire.datatype });
      return decodeBytesElements(wire.data);
    },
    strings() {
      return this.bytes().map((e) => utf8.decode(e));
    },
  };
}

/**
 * Whether a device tensor's `ref` is one a direct BLS call kept in the worker (`bls-direct.ts`):
 * those are negative, the main thread's positive, so neither side mistakes the other's.
 */
export function isDirectRef(ref: number): boolean {
  return ref < 0;
}

/** What a model returned as a wire tensor, checked against its shape. */
export function toWireTensor(tensor: OutputTensor): WireTensor {
  const info = datatype(tensor.datatype);
  if (!info) throw tensorError("JS_OUTPUT_UNKNOWN_DATATYPE", { output: tensor.name, datatype: tensor.datatype });
  const shape = [...tensor.shape];
  const device = tensor.device;
  if (device) {
    // Held on a GPU: only the reference travels (the server checks it is still held).
    const { ref, deviceId, byteSize } = device;
    // Held by this worker (a direct call's): the main thread cannot take it by reference.
    if (isDirectRef(ref)) throw tensorError("JS_TENSOR_DIRECT_DEVICE", { tensor: tensor.name, device: deviceId });
    return {
      name: tensor.name,
      datatype: info.name,
      shape,
      data: new Uint8Array(0),
      device: { ref, deviceId, byteSize },
    };
  }
  const count = elementCount(shape);
  const source = tensor.data;
  let data: Uint8Array;
  if (Array.isArray(source)) {
    if (info.name !== "BYTES") throw tensorError("JS_OUTPUT_LIST", { output: tensor.name, datatype: info.name });
    if (source.length !== count) {
      throw tensorError("JS_OUTPUT_ELEMENT_COUNT", {
        output: tensor.name,
        count: source.length,
        shape: String(shape),
        expected: count,
      });
    }
    data = encodeBytesElements(source);
  } else {
    const view = source as ArrayBufferView;
    data = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    if (info.name !== "BYTES" && data.byteLength !== count * info.byteSize) {
      throw tensorError("JS_OUTPUT_BYTE_SIZE", {
        output: tensor.name,
        bytes: data.byteLength,
        shape: String(shape),
        datatype: info.name,
        expected: count * info.byteSize,
      });
    }
  }
  return { name: tensor.name, datatype: info.name, shape, data };
}

/** Anything thrown (or given as a response's error) as a wire error with a Triton code. */
export function wireError(error: unknown): WireError {
  if (typeof error === "string") return { message: error };
  const message = (error as Error)?.message ?? String(error);
  const { code, id, values } = (error ?? {}) as { code?: unknown; id?: unknown; values?: unknown };
  return {
    message,
    ...(typeof code === "string" ? { code } : {}),
    ...(typeof id === "string" && typeof values === "object" && values !== null
      ? { id, values: values as Record<string, string | number> }
      : {}),
  };
}
