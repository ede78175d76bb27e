import type { ProtocolDataType } from "@galley/config";

/** A request, response or tensor parameter value. */
export type ParameterValue = string | number | bigint | boolean;

/** Parameters by name. */
export type Parameters = Record<string, ParameterValue>;

/**
 * A tensor as the core sees it: a datatype, a shape and the bytes that arrived (raw gRPC
 * contents, a slice of the binary HTTP body, a shared-memory region), little-endian and
 * row-major; BYTES elements are 4-byte-length-prefixed. `data` is a view, never a copy.
 */
export interface Tensor {
  name: string;
  datatype: ProtocolDataType;
  shape: number[];
  data: Uint8Array;
  parameters: Parameters;
  /**
   * The buffer under `data` belongs to this request alone (a binary HTTP body, a batch, a model
   * output), so it may be moved to a worker thread instead of copied. Moving detaches it here.
   */
  movable?: boolean;
  /**
   * The tensor's bytes are in a registered shared-memory region: an input whose `data` the core
   * reads from there before validating, or an output the core has written there (its `data` is
   * then empty and frontends send no contents for it).
   */
  sharedMemory?: import("./shared-memory.js").SharedMemoryRef;
}

/** Product of the dimensions (1 for a scalar shape). */
export function elementCount(shape: readonly number[]): number {
  let count = 1;
  for (const d of shape) count *= d;
  return count;
}

/** Split a BYTES tensor's length-prefixed bytes into its elements (views, no copies). */
export function bytesElements(data: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  for (let at = 0; at + 4 <= data.byteLength; ) {
    const length = view.getUint32(at, true);
    out.push(data.subarray(at + 4, at + 4 + length));
    at += 4 + length;
  }
  return out;
}

/** Number of elements in length-prefixed BYTES data, or -1 when it is malformed. */
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

/** Length-prefix BYTES elements into one buffer. */
export function encodeBytesElements(elements: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const e of elements) size += 4 + e.byteLength;
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const e of elements) {
    view.setUint32(at, e.byteLength, true);
    out.set(e, at + 4);
    at += 4 + e.byteLength;
  }
  return out;
}
