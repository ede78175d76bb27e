import type { ProtocolDataType } from "@galley/proto";

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
