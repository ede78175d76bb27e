import { encodeBytesElements } from "@galley/proto";
import { datatype } from "../../base/datatype.js";
import { InferenceError, requestId } from "../../base/errors.js";
import type { Tensor } from "../../base/tensor.js";
import { asBool, asDouble, asInt, asString, asUint, internal } from "./json-access.js";
import { isDecimalArray, JsonFloat, JsonTooDeep, type JsonValue, MAX_DEPTH } from "./json-parse.js";
import { formatDouble, formatDoubles, type JsonWriter } from "./json-write.js";

const encoder = new TextEncoder();
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const INT64_MAX = (1n << 63n) - 1n;

/**
 * The element count of a JSON-data input of shape `dims` (none of them 0), checked as Triton
 * does before it sizes the buffer: the count and, for fixed-size types, the byte size must fit
 * an int64. It is exact below 2^53; above, it only bounds how much `data` is read.
 *
 * @throws {@link InferenceError} ELEMENT_COUNT_OVERFLOW or BYTE_SIZE_OVERFLOW (400).
 */
export function jsonElementCount(input: string, type: string, dims: readonly bigint[]): number {
  let count = 1n;
  for (const d of dims) {
    count *= d;
    if (count > INT64_MAX) {
      throw new InferenceError("ELEMENT_COUNT_OVERFLOW", { input, shape: `[${dims.join(",")}]`, max: INT64_MAX });
    }
  }
  const size = type === "BYTES" ? undefined : datatype(type)?.byteSize;
  if (size !== undefined && count * BigInt(size) > INT64_MAX) {
    throw new InferenceError("BYTE_SIZE_OVERFLOW", { input, count, datatype: type, max: INT64_MAX });
  }
  return Number(count);
}

/**
 * An input's JSON `data` as tensor bytes (PROTOCOL.md §1.6, Triton's `ReadDataFromJson`):
 * nested arrays read in row-major order, elements converted per datatype (integers truncated
 * to the type's width, FP32 rounded from double), BYTES elements length-prefixed. The bytes go
 * into a fresh buffer owned by the request, so the tensor is movable.
 *
 * @throws {@link InferenceError} with Triton's texts: type mismatches and element-count
 * mismatches are INTERNAL (500); FP16/BF16 and unknown datatypes are INVALID_ARG (400).
 */
export function tensorFromJson(name: string, type: string, count: number, data: JsonValue[], id = ""): Uint8Array {
  if (type === "BYTES") return bytesFromJson(data);
  if (type === "FP16" || type === "BF16") throw new InferenceError("JSON_HALF_INPUT", { datatype: type, input: name });
  const info = datatype(type);
  if (!info) throw new InferenceError("UNKNOWN_DATATYPE", { id: requestId(id), datatype: type, input: name });
  const flat = LITTLE_ENDIAN ? flatIntegers(type, count, data) : undefined;
  if (flat) return flat;
  // Never allocate more than the data can fill: a huge shape with little data fails below.
  const leaves = countLeaves(data, count + 1);
  const filled = Math.min(count, leaves);
  const out = new Uint8Array(filled * info.byteSize);
  const view = new DataView(out.buffer);
  const write = WRITERS[type] as (view: DataView, index: number, value: JsonValue) => void;
  let index = 0;
  // Decimal arrays (the parser's fast path) go into FP32/FP64 tensors in one typed-array copy
  // (the same IEEE rounding as DataView's setters); for any other type their elements are read
  // as the JsonFloat literals they are, with the usual errors.
  const floats = LITTLE_ENDIAN
    ? type === "FP32"
      ? new Float32Array(out.buffer, 0, filled)
      : type === "FP64"
        ? new Float64Array(out.buffer, 0, filled)
        : undefined
    : undefined;
  const visit = (value: JsonValue): void => {
    if (value instanceof JsonTooDeep) throw tooDeep();
    if (isDecimalArray(value)) {
      if (floats && index + value.length <= count) {
        floats.set(value, index);
        index += value.length;
      } else for (const element of value) visit(new JsonFloat(element));
      return;
    }
    if (Array.isArray(value)) {
      for (const element of value) visit(element);
      return;
    }
    if (index >= count) throw new InferenceError("JSON_DATA_TOO_MANY");
    write(view, index, value);
    index++;
  };
  // One wrapper for the whole walk, not a closure per element (this runs for every JSON input).
  internal("Unable to parse 'data'", () => visit(data));
  if (index !== count) throw new InferenceError("JSON_DATA_TOO_FEW");
  return out;
}

type NumberArray =
  | Int8Array
  | Int16Array
  | Int32Array
  | Uint8Array
  | Uint16Array
  | Uint32Array
  | Float32Array
  | Float64Array;

/** The typed arrays whose stores convert as the DataView setters below do, and whether the type is unsigned. */
const NUMBER_ARRAYS: Record<string, [new (length: number) => NumberArray, boolean]> = {
  INT8: [Int8Array, false],
  INT16: [Int16Array, false],
  INT32: [Int32Array, false],
  UINT8: [Uint8Array, true],
  UINT16: [Uint16Array, true],
  UINT32: [Uint32Array, true],
  FP32: [Float32Array, false],
  FP64: [Float64Array, false],
};

/**
 * The common case in one pass over a typed array: `data` a flat array of exactly `count` integer
 * literals held as numbers (non-negative for an unsigned type), for a type of up to 32 bits or a
 * float. A typed array's store wraps modulo 2^bits or rounds as the DataView setters do, so the
 * bytes are the general walk's; anything else (nesting, decimals, bigints, BOOL and the 64-bit
 * integers, a wrong count) is left to that walk and its errors. Little-endian hosts only.
 */
function flatIntegers(type: string, count: number, data: JsonValue[]): Uint8Array | undefined {
  const kind = NUMBER_ARRAYS[type];
  if (!kind || data.length !== count || isDecimalArray(data)) return undefined;
  const [Numbers, unsigned] = kind;
  const out = new Numbers(count);
  for (let i = 0; i < count; i++) {
    const x = data[i];
    if (typeof x !== "number" || (unsigned && x < 0)) return undefined;
    out[i] = x;
  }
  return new Uint8Array(out.buffer, 0, out.byteLength);
}

/** BYTES `data`: every leaf must be a string; each is UTF-8 encoded and length-prefixed. */
function bytesFromJson(data: JsonValue[]): Uint8Array {
  const elements: Uint8Array[] = [];
  const visit = (value: JsonValue): void => {
    if (value instanceof JsonTooDeep) throw tooDeep();
    if (isDecimalArray(value)) {
      for (const element of value) visit(new JsonFloat(element));
      return;
    }
    if (Array.isArray(value)) {
      for (const element of value) visit(element);
      return;
    }
    const bytes = encoder.encode(internal("Unable to parse JSON bytes array", () => asString(value)));
    elements.push(bytes);
  };
  visit(data);
  return encodeBytesElements(elements);
}

/** Tensor data nested past the parser's depth, as Triton refuses it. */
function tooDeep(): InferenceError {
  return new InferenceError("JSON_TOO_DEEP", { limit: MAX_DEPTH });
}

function countLeaves(data: JsonValue[], cap: number): number {
  let n = 0;
  const visit = (value: JsonValue): void => {
    if (n >= cap) return;
    if (isDecimalArray(value)) n = Math.min(cap, n + value.length);
    else if (Array.isArray(value)) for (const element of value) visit(element);
    else n++;
  };
  for (const element of data) visit(element);
  return n;
}

type Write = (view: DataView, index: number, value: JsonValue) => void;

// Integer literals that fit a double are passed to the DataView setters as they are: those wrap
// modulo 2^bits, which is the truncation Triton's C++ casts do. Larger ones are cut as bigints.
const uint = (x: JsonValue, bits: number): number =>
  typeof x === "number" && x >= 0 ? x : Number(BigInt.asUintN(bits, asUint(x)));
const int = (x: JsonValue, bits: number): number => (typeof x === "number" ? x : Number(BigInt.asIntN(bits, asInt(x))));

const WRITERS: Record<string, Write> = {
  BOOL: (v, i, x) => v.setUint8(i, asBool(x) ? 1 : 0),
  UINT8: (v, i, x) => v.setUint8(i, uint(x, 8)),
  UINT16: (v, i, x) => v.setUint16(i * 2, uint(x, 16), true),
  UINT32: (v, i, x) => v.setUint32(i * 4, uint(x, 32), true),
  UINT64: (v, i, x) => v.setBigUint64(i * 8, asUint(x), true),
  INT8: (v, i, x) => v.setInt8(i, int(x, 8)),
  INT16: (v, i, x) => v.setInt16(i * 2, int(x, 16), true),
  INT32: (v, i, x) => v.setInt32(i * 4, int(x, 32), true),
  INT64: (v, i, x) => v.setBigInt64(i * 8, asInt(x), true),
  FP32: (v, i, x) => v.setFloat32(i * 4, asDouble(x), true),
  FP64: (v, i, x) => v.setFloat64(i * 8, asDouble(x), true),
};

/**
 * Write an output tensor's elements as a flat JSON array (Triton's `WriteDataToJson`): BOOL as
 * true/false, integers exactly (64-bit included), FP32 widened to double, BYTES as strings.
 *
 * @throws {@link InferenceError} INVALID_ARG for FP16/BF16, INTERNAL when the bytes do not
 * match the shape.
 */
export function writeTensorJson(writer: JsonWriter, tensor: Tensor): void {
  const type = tensor.datatype;
  if (type === "FP16" || type === "BF16") {
    throw new InferenceError("JSON_HALF_OUTPUT", { datatype: type, output: tensor.name });
  }
  let count = 1;
  for (const d of tensor.shape) count *= d;
  const data = tensor.data;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const mismatch = () => new InferenceError("OUTPUT_SIZE_MISMATCH", { output: tensor.name });
  writer.raw("[");
  if (type === "BYTES") {
    let at = 0;
    for (let e = 0; e < count; e++) {
      if (at + 4 > data.byteLength) throw mismatch();
      const length = view.getUint32(at, true);
      at += 4;
      if (at + length > data.byteLength) throw mismatch();
      if (e > 0) writer.raw(",");
      writer.bytesString(data.subarray(at, at + length));
      at += length;
    }
  } else {
    const info = datatype(type);
    const read = READERS[type];
    if (!info || !read) throw new InferenceError("OUTPUT_BAD_DATATYPE");
    if (data.byteLength !== count * info.byteSize) throw mismatch();
    if (LITTLE_ENDIAN && (type === "FP32" || type === "FP64")) {
      // Unaligned bytes cannot be viewed as floats: copy them once.
      const bytes = data.byteOffset % info.byteSize === 0 ? data : new Uint8Array(data);
      const Floats = type === "FP32" ? Float32Array : Float64Array;
      writer.raw(formatDoubles(new Floats(bytes.buffer as ArrayBuffer, bytes.byteOffset, count)));
      writer.raw("]");
      return;
    }
    const Integers = LITTLE_ENDIAN && data.byteOffset % info.byteSize === 0 ? INTEGER_VIEWS[type] : undefined;
    if (Integers) {
      // A typed array's join prints each integer as String() does, in one native call.
      writer.raw(new Integers(data.buffer as ArrayBuffer, data.byteOffset, count).join(","));
    } else {
      const parts: string[] = new Array(count);
      for (let e = 0; e < count; e++) parts[e] = read(view, e);
      writer.raw(parts.join(","));
    }
  }
  writer.raw("]");
}

type IntegerView = new (buffer: ArrayBuffer, byteOffset: number, length: number) => { join(separator: string): string };

/** The integer types whose typed arrays print their elements as {@link READERS} does. */
const INTEGER_VIEWS: Record<string, IntegerView> = {
  INT8: Int8Array,
  INT16: Int16Array,
  INT32: Int32Array,
  INT64: BigInt64Array,
  UINT8: Uint8Array,
  UINT16: Uint16Array,
  UINT32: Uint32Array,
  UINT64: BigUint64Array,
};

const READERS: Record<string, (view: DataView, index: number) => string> = {
  BOOL: (v, i) => (v.getUint8(i) === 0 ? "false" : "true"),
  UINT8: (v, i) => String(v.getUint8(i)),
  UINT16: (v, i) => String(v.getUint16(i * 2, true)),
  UINT32: (v, i) => String(v.getUint32(i * 4, true)),
  UINT64: (v, i) => v.getBigUint64(i * 8, true).toString(),
  INT8: (v, i) => String(v.getInt8(i)),
  INT16: (v, i) => String(v.getInt16(i * 2, true)),
  INT32: (v, i) => String(v.getInt32(i * 4, true)),
  INT64: (v, i) => v.getBigInt64(i * 8, true).toString(),
  FP32: (v, i) => formatDouble(v.getFloat32(i * 4, true)),
  FP64: (v, i) => formatDouble(v.getFloat64(i * 8, true)),
};
