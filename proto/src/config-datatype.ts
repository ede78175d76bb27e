// The model config's `DataType` enum (`TYPE_FP32`, `TYPE_STRING`) and the protocol's datatype names.

import { ELEMENT_TYPES, type ProtocolDataType } from "./datatypes.js";
import { DataType } from "./gen/inference/model_config_pb.js";

const toProtocol = new Map<DataType, ProtocolDataType>(ELEMENT_TYPES.map((t) => [DataType[t.configName], t.name]));
const fromProtocol = new Map<string, DataType>(ELEMENT_TYPES.map((t) => [t.name, DataType[t.configName]]));

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
