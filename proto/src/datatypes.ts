// Triton's tensor datatypes: names, element sizes, typed arrays. Nothing is imported at run time, so
// worker threads can load this alone (`@galley/proto/datatypes`) without the generated descriptors.

import type { DataType } from "./gen/inference/model_config_pb.js";

/** A tensor datatype as the protocol spells it: `"FP32"`, `"INT64"`, `"BYTES"`, ... */
export type ProtocolDataType =
  | "BOOL"
  | "UINT8"
  | "UINT16"
  | "UINT32"
  | "UINT64"
  | "INT8"
  | "INT16"
  | "INT32"
  | "INT64"
  | "FP16"
  | "FP32"
  | "FP64"
  | "BYTES"
  | "BF16";

/** A typed-array constructor for a fixed-size datatype. */
export type TypedArrayConstructor =
  | Uint8ArrayConstructor
  | Int8ArrayConstructor
  | Uint16ArrayConstructor
  | Int16ArrayConstructor
  | Uint32ArrayConstructor
  | Int32ArrayConstructor
  | BigUint64ArrayConstructor
  | BigInt64ArrayConstructor
  | Float32ArrayConstructor
  | Float64ArrayConstructor;

/** One protocol datatype's element layout. */
export interface ElementType {
  name: ProtocolDataType;
  /** Bytes per element; 0 for BYTES, whose elements are 4-byte-length-prefixed (see `bytes-codec.ts`). */
  byteSize: number;
  /** The typed array that views this datatype's bytes; FP16/BF16 are viewed as Uint16; none for BYTES. */
  array?: TypedArrayConstructor;
  /** The name of the model config's `DataType` (`TYPE_FP32`; `TYPE_STRING` for BYTES). */
  configName: keyof typeof DataType;
}

/**
 * Every datatype, in protocol order.
 *
 * @example
 * ELEMENT_TYPES.map((t) => t.name) // ["BOOL", "UINT8", ..., "BYTES"]
 */
export const ELEMENT_TYPES: readonly Readonly<ElementType>[] = [
  { name: "BOOL", byteSize: 1, array: Uint8Array, configName: "TYPE_BOOL" },
  { name: "UINT8", byteSize: 1, array: Uint8Array, configName: "TYPE_UINT8" },
  { name: "UINT16", byteSize: 2, array: Uint16Array, configName: "TYPE_UINT16" },
  { name: "UINT32", byteSize: 4, array: Uint32Array, configName: "TYPE_UINT32" },
  { name: "UINT64", byteSize: 8, array: BigUint64Array, configName: "TYPE_UINT64" },
  { name: "INT8", byteSize: 1, array: Int8Array, configName: "TYPE_INT8" },
  { name: "INT16", byteSize: 2, array: Int16Array, configName: "TYPE_INT16" },
  { name: "INT32", byteSize: 4, array: Int32Array, configName: "TYPE_INT32" },
  { name: "INT64", byteSize: 8, array: BigInt64Array, configName: "TYPE_INT64" },
  { name: "FP16", byteSize: 2, array: Uint16Array, configName: "TYPE_FP16" },
  { name: "FP32", byteSize: 4, array: Float32Array, configName: "TYPE_FP32" },
  { name: "FP64", byteSize: 8, array: Float64Array, configName: "TYPE_FP64" },
  { name: "BF16", byteSize: 2, array: Uint16Array, configName: "TYPE_BF16" },
  // The one name that differs: config.pbtxt says TYPE_STRING, the wire says BYTES.
  { name: "BYTES", byteSize: 0, configName: "TYPE_STRING" },
];

const byName = new Map<string, Readonly<ElementType>>(ELEMENT_TYPES.map((t) => [t.name, t]));

/**
 * The element layout of the datatype called `name` on the wire, or undefined. Matching is exact,
 * as in Triton: `"fp32"` names none.
 *
 * @example
 * elementType("INT64")?.byteSize // 8
 */
export function elementType(name: string): Readonly<ElementType> | undefined {
  return byName.get(name);
}
