// Typed tensors for requests (`tensor.int32([1, 16], data)`) and typed views of response outputs.

import { decodeBytesElements, elementType, encodeBytesElements, type ProtocolDataType } from "@galley/proto";

/** A KServe v2 datatype. */
export type DataType = ProtocolDataType;

/** An input tensor: datatype, shape and its little-endian bytes (BYTES: 4-byte-length-prefixed elements). */
export interface InputTensor {
  readonly datatype: DataType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** Where a tensor lives in a registered shared-memory region. */
export interface SharedMemoryPlacement {
  /** The name the region was registered under. */
  region: string;
  byteSize: number;
  offset?: number;
}

type Typed =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array;

const fromUtf8 = new TextDecoder("utf-8", { ignoreBOM: true });

/** The number of elements a shape holds. */
export function elementCount(shape: readonly number[]): number {
  return shape.reduce((n, d) => n * d, 1);
}

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function checked(datatype: DataType, shape: readonly number[], data: Uint8Array, count: number): InputTensor {
  const expected = elementCount(shape);
  if (count !== expected) {
    throw new RangeError(`${datatype} tensor of shape [${shape}] needs ${expected} elements, got ${count}`);
  }
  return { datatype, shape: [...shape], data };
}

/** The values each integer datatype holds, least and greatest. */
const INTEGER_RANGES: Partial<Record<DataType, readonly [number | bigint, number | bigint]>> = {
  UINT8: [0, 0xff],
  UINT16: [0, 0xffff],
  UINT32: [0, 0xffffffff],
  UINT64: [0n, 0xffffffffffffffffn],
  INT8: [-0x80, 0x7f],
  INT16: [-0x8000, 0x7fff],
  INT32: [-0x80000000, 0x7fffffff],
  INT64: [-0x8000000000000000n, 0x7fffffffffffffffn],
};

/**
 * Check that every value fits an integer datatype, instead of letting a typed array wrap it
 * (`Int32Array.of(2 ** 31)` holds -2147483648) or truncate it (`Uint8Array.of(3.7)` holds 3).
 * Numbers and bigints are both taken; returns whether any was a bigint.
 *
 * @throws RangeError naming the first value that is not an integer or is out of range, and its index.
 */
function checkIntegers(
  datatype: DataType,
  values: ArrayLike<unknown>,
  [least, greatest]: readonly [number | bigint, number | bigint],
): boolean {
  let bigints = false;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    const integer = typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v));
    if (!integer) {
      throw new RangeError(
        `${datatype} value ${typeof v === "string" ? JSON.stringify(v) : String(v)} at index ${i} is not an integer`,
      );
    }
    if ((v as number) < least || (v as number) > greatest) {
      throw new RangeError(`${datatype} value ${v} at index ${i} is out of range [${least}, ${greatest}]`);
    }
    if (typeof v === "bigint") bigints = true;
  }
  return bigints;
}

function numeric<A extends Typed>(
  datatype: Exclude<DataType, "BYTES">,
  ArrayType: {
    new (values: ArrayLike<number> | ArrayLike<bigint> | ArrayBufferLike): A;
    from(values: ArrayLike<unknown>, map: (v: unknown) => number | bigint): A;
    name: string;
  },
) {
  const range = INTEGER_RANGES[datatype];
  const big = datatype === "INT64" || datatype === "UINT64";
  return (shape: readonly number[], values: A | ArrayLike<number | bigint>): InputTensor => {
    // A typed array of the right type is used as it is: no copy.
    if (values instanceof (ArrayType as unknown as new () => A)) {
      return checked(datatype, shape, bytesOf(values as A), (values as A).length);
    }
    // Integers are checked first: a typed array would wrap or truncate them silently.
    const bigints = range !== undefined && checkIntegers(datatype, values, range);
    // Checked values convert exactly: numbers to bigints for the 64-bit types, bigints to numbers for the rest.
    const typed = big
      ? ArrayType.from(values, (v) => BigInt(v as number | bigint))
      : bigints
        ? ArrayType.from(values, Number)
        : new ArrayType(values as ArrayLike<number>);
    return checked(datatype, shape, bytesOf(typed), typed.length);
  };
}

/** IEEE half-precision bits of a number (round to nearest even). */
export function toFloat16Bits(value: number): number {
  const f32 = new Float32Array([value]);
  const bits = new Uint32Array(f32.buffer)[0] as number;
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  let mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  let e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    let half = mantissa >> shift;
    const rest = mantissa & ((1 << shift) - 1);
    const midpoint = 1 << (shift - 1);
    if (rest > midpoint || (rest === midpoint && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mantissa >> 13);
  const rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half++;
  e = half >> 10;
  return sign | half;
}

/** The number a half-precision value's bits stand for. */
export function fromFloat16Bits(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

/** bfloat16 bits of a number (the top half of its float32, rounded to nearest even). */
export function toBfloat16Bits(value: number): number {
  const bits = new Uint32Array(new Float32Array([value]).buffer)[0] as number;
  if (Number.isNaN(value)) return 0x7fc0;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** The number bfloat16 bits stand for. */
export function fromBfloat16Bits(bits: number): number {
  return new Float32Array(new Uint32Array([bits << 16]).buffer)[0] as number;
}

/**
 * BYTES elements (strings as UTF-8) as one buffer of 4-byte little-endian lengths, each followed
 * by its bytes: @galley/proto's `encodeBytesElements`.
 */
export function encodeBytes(elements: readonly (string | Uint8Array)[]): Uint8Array {
  return encodeBytesElements(elements);
}

/**
 * Split length-prefixed BYTES data into its elements (views, no copies): @galley/proto's
 * `decodeBytesElements`.
 *
 * @throws RangeError (a `BytesCodecError`) when a length prefix is cut short or an element
 * overruns the data.
 */
export function decodeBytes(data: Uint8Array): Uint8Array[] {
  return decodeBytesElements(data);
}

/**
 * Input tensor constructors, one per datatype: `tensor.int32([1, 16], values)`. A typed array of
 * the datatype's own kind is used without a copy; other array-likes are converted. Integer
 * datatypes take numbers or bigints and refuse, with a RangeError naming the value and its index,
 * any that is not an integer or does not fit (a typed array would wrap `2 ** 31` to `-2 ** 31` and
 * truncate `3.7` to `3`). FP16 and BF16 take ordinary numbers.
 */
export const tensor = {
  bool: (shape: readonly number[], values: ArrayLike<boolean>): InputTensor =>
    checked(
      "BOOL",
      shape,
      Uint8Array.from(values, (v) => (v ? 1 : 0)),
      values.length,
    ),
  uint8: numeric("UINT8", Uint8Array),
  uint16: numeric("UINT16", Uint16Array),
  uint32: numeric("UINT32", Uint32Array),
  uint64: numeric("UINT64", BigUint64Array),
  int8: numeric("INT8", Int8Array),
  int16: numeric("INT16", Int16Array),
  int32: numeric("INT32", Int32Array),
  int64: numeric("INT64", BigInt64Array),
  fp32: numeric("FP32", Float32Array),
  fp64: numeric("FP64", Float64Array),
  fp16: (shape: readonly number[], values: ArrayLike<number>): InputTensor =>
    checked("FP16", shape, bytesOf(Uint16Array.from(values, toFloat16Bits)), values.length),
  bf16: (shape: readonly number[], values: ArrayLike<number>): InputTensor =>
    checked("BF16", shape, bytesOf(Uint16Array.from(values, toBfloat16Bits)), values.length),
  bytes: (shape: readonly number[], elements: readonly (string | Uint8Array)[]): InputTensor =>
    checked("BYTES", shape, encodeBytes(elements), elements.length),
  /** Bytes already in the protocol's layout. */
  raw: (datatype: DataType, shape: readonly number[], data: Uint8Array): InputTensor => {
    if (datatype !== "BYTES") {
      const expected = elementCount(shape) * (elementType(datatype)?.byteSize ?? Number.NaN);
      if (data.byteLength !== expected) {
        throw new RangeError(`${datatype} tensor of shape [${shape}] needs ${expected} bytes, got ${data.byteLength}`);
      }
    }
    return { datatype, shape: [...shape], data };
  },
};

/**
 * An output tensor of a response, with typed views of its bytes.
 *
 * An output the request placed in a shared-memory region has no bytes in the response: `data` is
 * empty, `sharedMemory` says where the server wrote them, and the typed views throw a TypeError
 * that names the region (read it from the region, e.g. `SystemSharedMemory.read(offset, byteSize)`).
 */
export class OutputTensor {
  constructor(
    readonly name: string,
    readonly datatype: DataType,
    readonly shape: readonly number[],
    /** The raw bytes, as the protocol carries them (empty for an output in shared memory). */
    readonly data: Uint8Array,
    /** Where the server wrote the output, when the request placed it in a shared-memory region. */
    readonly sharedMemory?: SharedMemoryPlacement,
  ) {}

  /** The bytes the views read: the response's, unless the output went to shared memory. */
  #bytes(): Uint8Array {
    const placement = this.sharedMemory;
    if (placement) {
      const offset = placement.offset ?? 0;
      throw new TypeError(
        `output '${this.name}' was written to shared-memory region '${placement.region}' (offset ${offset}, ` +
          `${placement.byteSize} bytes), not into the response: read it from the region ` +
          `(e.g. region.read(${offset}, ${placement.byteSize}))`,
      );
    }
    return this.data;
  }

  #typed<A extends Typed>(
    expected: DataType[],
    ArrayType: { new (buffer: ArrayBuffer, offset: number, length: number): A; BYTES_PER_ELEMENT: number },
  ): A {
    if (!expected.includes(this.datatype)) {
      throw new TypeError(`output '${this.name}' is ${this.datatype}, not ${expected.join(" or ")}`);
    }
    const size = ArrayType.BYTES_PER_ELEMENT;
    const data = this.#bytes();
    const aligned = data.byteOffset % size === 0 ? data : new Uint8Array(data);
    return new ArrayType(aligned.buffer as ArrayBuffer, aligned.byteOffset, aligned.byteLength / size);
  }

  bool(): boolean[] {
    return Array.from(this.#typed(["BOOL"], Uint8Array), (v) => v !== 0);
  }
  uint8(): Uint8Array {
    return this.#typed(["UINT8", "BOOL"], Uint8Array);
  }
  uint16(): Uint16Array {
    return this.#typed(["UINT16"], Uint16Array);
  }
  uint32(): Uint32Array {
    return this.#typed(["UINT32"], Uint32Array);
  }
  uint64(): BigUint64Array {
    return this.#typed(["UINT64"], BigUint64Array);
  }
  int8(): Int8Array {
    return this.#typed(["INT8"], Int8Array);
  }
  int16(): Int16Array {
    return this.#typed(["INT16"], Int16Array);
  }
  int32(): Int32Array {
    return this.#typed(["INT32"], Int32Array);
  }
  int64(): BigInt64Array {
    return this.#typed(["INT64"], BigInt64Array);
  }
  fp32(): Float32Array {
    return this.#typed(["FP32"], Float32Array);
  }
  fp64(): Float64Array {
    return this.#typed(["FP64"], Float64Array);
  }
  /** FP16 values decoded to numbers. */
  fp16(): Float32Array {
    return Float32Array.from(this.#typed(["FP16"], Uint16Array), fromFloat16Bits);
  }
  /** BF16 values decoded to numbers. */
  bf16(): Float32Array {
    return Float32Array.from(this.#typed(["BF16"], Uint16Array), fromBfloat16Bits);
  }
  /** BYTES elements as byte views. */
  bytes(): Uint8Array[] {
    if (this.datatype !== "BYTES") throw new TypeError(`output '${this.name}' is ${this.datatype}, not BYTES`);
    return decodeBytes(this.#bytes());
  }
  /** BYTES elements decoded as UTF-8. */
  strings(): string[] {
    return this.bytes().map((e) => fromUtf8.decode(e));
  }
  /** The values as numbers (FP16/BF16 decoded), bigints (64-bit integers), booleans or strings (BYTES). */
  values(): (number | bigint | boolean | string)[] {
    switch (this.datatype) {
      case "BYTES":
        return this.strings();
      case "BOOL":
        return this.bool();
      case "FP16":
        return [...this.fp16()];
      case "BF16":
        return [...this.bf16()];
      default: {
        const method = this.datatype.toLowerCase() as "int32";
        return Array.from(this[method]() as ArrayLike<number | bigint>);
      }
    }
  }
}
