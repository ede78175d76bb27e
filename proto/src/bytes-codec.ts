// Triton's BYTES tensor layout: each element is a 4-byte little-endian length followed by that many
// bytes, elements back to back. Nothing is imported, so worker threads can load this alone
// (`@galley/proto/bytes-codec`).

const utf8 = new TextEncoder();

/** BYTES data that does not split into whole elements; `offset` is where the broken element starts. */
export class BytesCodecError extends RangeError {
  override name = "BytesCodecError";
  constructor(
    message: string,
    /** The index of the element that is cut short. */
    readonly element: number,
    /** The byte offset of that element's length prefix. */
    readonly offset: number,
  ) {
    super(message);
  }
}

/**
 * BYTES elements as one buffer of 4-byte little-endian lengths, each followed by its bytes.
 * Strings are encoded as UTF-8.
 *
 * @example
 * encodeBytesElements(["ab"]) // Uint8Array [2, 0, 0, 0, 97, 98]
 */
export function encodeBytesElements(elements: readonly (string | Uint8Array)[]): Uint8Array {
  const parts = elements.map((e) => (typeof e === "string" ? utf8.encode(e) : e));
  let size = 0;
  for (const part of parts) size += 4 + part.byteLength;
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const part of parts) {
    view.setUint32(at, part.byteLength, true);
    out.set(part, at + 4);
    at += 4 + part.byteLength;
  }
  return out;
}

/**
 * Split length-prefixed BYTES data into its elements (views of `data`, no copies).
 *
 * @throws {@link BytesCodecError} when fewer than 4 bytes are left for a length prefix, or a
 * length reaches past the end of `data`.
 *
 * @example
 * decodeBytesElements(new Uint8Array([1, 0, 0, 0, 120])) // [Uint8Array [120]]
 */
export function decodeBytesElements(data: Uint8Array): Uint8Array[] {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const out: Uint8Array[] = [];
  for (let at = 0; at < data.byteLength; ) {
    if (at + 4 > data.byteLength) {
      throw new BytesCodecError("malformed BYTES tensor: a length prefix is cut short", out.length, at);
    }
    const length = view.getUint32(at, true);
    if (at + 4 + length > data.byteLength) {
      throw new BytesCodecError("malformed BYTES tensor: an element overruns the data", out.length, at);
    }
    out.push(data.subarray(at + 4, at + 4 + length));
    at += 4 + length;
  }
  return out;
}

/**
 * The number of elements in length-prefixed BYTES data, or -1 when it does not split into whole
 * elements (the cases {@link decodeBytesElements} throws for). Makes no views.
 */
export function countBytesElements(data: Uint8Array): number {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let count = 0;
  let at = 0;
  while (at < data.byteLength) {
    if (at + 4 > data.byteLength) return -1;
    at += 4 + view.getUint32(at, true);
    if (at > data.byteLength) return -1;
    count++;
  }
  return count;
}
