import { dataTypeFromProtocol, type ProtocolDataType } from "@galley/config";
import type { DataType } from "@galley/proto";

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

/** What the server knows about one protocol datatype. */
export interface DatatypeInfo {
  name: ProtocolDataType;
  /** The config enum value (`TYPE_FP32`, `TYPE_STRING` for BYTES). */
  dataType: DataType;
  /** Bytes per element; 0 for BYTES, whose elements are 4-byte-length-prefixed. */
  byteSize: number;
  /** The typed array that views this datatype's bytes; FP16/BF16 are viewed as Uint16. */
  array?: TypedArrayConstructor;
}

const table: DatatypeInfo[] = [
  { name: "BOOL", byteSize: 1, array: Uint8Array },
  { name: "UINT8", byteSize: 1, array: Uint8Array },
  { name: "UINT16", byteSize: 2, array: Uint16Array },
  { name: "UINT32", byteSize: 4, array: Uint32Array },
  { name: "UINT64", byteSize: 8, array: BigUint64Array },
  { name: "INT8", byteSize: 1, array: Int8Array },
  { name: "INT16", byteSize: 2, array: Int16Array },
  { name: "INT32", byteSize: 4, array: Int32Array },
  { name: "INT64", byteSize: 8, array: BigInt64Array },
  { name: "FP16", byteSize: 2, array: Uint16Array },
  { name: "FP32", byteSize: 4, array: Float32Array },
  { name: "FP64", byteSize: 8, array: Float64Array },
  { name: "BF16", byteSize: 2, array: Uint16Array },
  { name: "BYTES", byteSize: 0 },
].map((d) => ({ ...d, name: d.name as ProtocolDataType, dataType: dataTypeFromProtocol(d.name) }));

const byName = new Map(table.map((d) => [d.name as string, d]));
const byDataType = new Map(table.map((d) => [d.dataType, d]));

/** The datatype called `name` on the wire, or undefined when there is none. */
export function datatype(name: string): DatatypeInfo | undefined {
  return byName.get(name);
}

/** The datatype of a config `data_type`. */
export function datatypeOf(dataType: DataType): DatatypeInfo | undefined {
  return byDataType.get(dataType);
}

/** Every datatype, in protocol order. */
export const DATATYPES: readonly DatatypeInfo[] = table;
