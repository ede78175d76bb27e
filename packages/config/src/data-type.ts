import { DataType } from "@galley/proto";

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

const toProtocol = new Map<DataType, ProtocolDataType>([
  [DataType.TYPE_BOOL, "BOOL"],
  [DataType.TYPE_UINT8, "UINT8"],
  [DataType.TYPE_UINT16, "UINT16"],
  [DataType.TYPE_UINT32, "UINT32"],
  [DataType.TYPE_UINT64, "UINT64"],
  [DataType.TYPE_INT8, "INT8"],
  [DataType.TYPE_INT16, "INT16"],
  [DataType.TYPE_INT32, "INT32"],
  [DataType.TYPE_INT64, "INT64"],
  [DataType.TYPE_FP16, "FP16"],
  [DataType.TYPE_FP32, "FP32"],
  [DataType.TYPE_FP64, "FP64"],
  // The one name that differs: config.pbtxt says TYPE_STRING, the wire says BYTES.
  [DataType.TYPE_STRING, "BYTES"],
  [DataType.TYPE_BF16, "BF16"],
]);

const fromProtocol = new Map<string, DataType>([...toProtocol].map(([type, name]) => [name, type]));

/**
 * The protocol string for a config datatype, as Triton reports it in metadata and responses.
 * `TYPE_INVALID` (and any unknown value) gives `"INVALID"`, as Triton does.
 *
 * @example
 * dataTypeToProtocol(DataType.TYPE_STRING) // "BYTES"
 */
export function dataTypeToProtocol(type: DataType): ProtocolDataType | "INVALID" {
  return toProtocol.get(type) ?? "INVALID";
}

/**
 * The config datatype for a protocol string, or `TYPE_INVALID` when the string names none.
 * Matching is exact, as in Triton: `"fp32"` is invalid.
 *
 * @example
 * dataTypeFromProtocol("BYTES") // DataType.TYPE_STRING
 */
export function dataTypeFromProtocol(name: string): DataType {
  return fromProtocol.get(name) ?? DataType.TYPE_INVALID;
}
