// The datatypes' element sizes and typed arrays, with no dependency on the config package, so that
// worker threads (scripted models) can load it cheaply. `datatype.ts` adds the config enums.

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
  name: string;
  /** Bytes per element; 0 for BYTES, whose elements are 4-byte-length-prefixed. */
  byteSize: number;
  /** The typed array that views this datatype's bytes; FP16/BF16 are viewed as Uint16. */
  array?: TypedArrayConstructor;
}

/** Every datatype, in protocol order. */
export const ELEMENT_TYPES: readonly ElementType[] = [
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
];

const byName = new Map(ELEMENT_TYPES.map((d) => [d.name, d]));

/** The element layout of the datatype called `name`, or undefined. */
export function elementType(name: string): ElementType | undefined {
  return byName.get(name);
}
