import { dataTypeFromProtocol, type ProtocolDataType } from "@galley/config";
import type { DataType } from "@galley/proto";
import { ELEMENT_TYPES, type ElementType } from "./element-types.js";

export type { TypedArrayConstructor } from "./element-types.js";

/** What the server knows about one protocol datatype. */
export interface DatatypeInfo extends ElementType {
  name: ProtocolDataType;
  /** The config enum value (`TYPE_FP32`, `TYPE_STRING` for BYTES). */
  dataType: DataType;
}

const table: DatatypeInfo[] = ELEMENT_TYPES.map((d) => ({
  ...d,
  name: d.name as ProtocolDataType,
  dataType: dataTypeFromProtocol(d.name),
}));

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
