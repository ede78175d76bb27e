import { DataType, ELEMENT_TYPES, type ElementType } from "@galley/proto";

export type { TypedArrayConstructor } from "@galley/proto";

/** What the server knows about one protocol datatype: @galley/proto's table entry and its config enum. */
export interface DatatypeInfo extends ElementType {
  /** The config enum value (`TYPE_FP32`, `TYPE_STRING` for BYTES). */
  dataType: DataType;
}

const table: DatatypeInfo[] = ELEMENT_TYPES.map((d) => ({ ...d, dataType: DataType[d.configName] }));

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
