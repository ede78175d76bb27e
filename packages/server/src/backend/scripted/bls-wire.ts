// What JS and Python scripted models share on their way to and from the server: tensors, BLS
// calls and their answers. Tensor bytes travel in `data` and are moved (transfer list), never
// copied, where the buffer allows it.
import type { Parameters, Tensor } from "../../base/tensor.js";
import type { DirectRoute } from "../backend.js";

export interface WireTensor {
  name: string;
  datatype: string;
  shape: number[];
  /** The bytes; empty for a tensor held on a GPU (`device`). */
  data: Uint8Array;
  /** A tensor the model holds on a GPU from a BLS call (see `BlsCalls`): its reference there. */
  device?: WireDevice;
}

/** A BLS output kept on a GPU for a model, by reference: the bytes stay in the server. */
export interface WireDevice {
  /** The instance's number for it (valid until released: see `BlsCalls`). */
  ref: number;
  deviceId: number;
  byteSize: number;
}

/** Triton's `preferred_memory` of a BLS call: where the model wants the outputs. */
export interface WirePreferredMemory {
  kind: "cpu" | "gpu";
  deviceId: number;
}

export interface WireError {
  message: string;
  /** A Triton code (`INVALID_ARG`, ...); INTERNAL when absent. */
  code?: string;
  /**
   * The call was refused before it ran (an unknown model, a request the model does not take, a
   * full queue): Triton's Python stub words these `Model <name> - Error when running inference: ...`.
   */
  refused?: boolean;
  /** The error table's id and values, for the errors the worker itself raises (see `TENSOR_ERROR_IDS`). */
  id?: string;
  values?: Record<string, string | number>;
}

export interface WireBlsRequest {
  model: string;
  version: string;
  id: string;
  inputs: WireTensor[];
  outputs: string[];
  parameters: Parameters;
  /** Absent: host memory. */
  preferredMemory?: WirePreferredMemory;
  /** The key of the request whose trace the call's is a child of (Python's `trace=request.trace()`). */
  traceParent?: number;
  /** The model marked the call `direct`: the answer brings the route for the next ones, if any. */
  direct?: boolean;
}

export interface WireBlsResponse {
  modelName: string;
  modelVersion: string;
  id: string;
  parameters: Parameters;
  outputs: WireTensor[];
}

/** The answer to a BLS call, one message per response (a streamed call has several). */
export interface BlsReply {
  kind: "bls-reply";
  call: number;
  response?: WireBlsResponse;
  error?: WireError;
  final: boolean;
  /** For a call marked `direct`: how the worker runs the next ones itself (see `DirectRoute`). */
  route?: DirectRoute;
}

/** The buffers a set of tensors can move instead of being copied (each buffer once). */
export function transferList(tensors: readonly WireTensor[], into: Set<ArrayBuffer> = new Set()): Set<ArrayBuffer> {
  for (const t of tensors) {
    if (t.device) continue;
    const buffer = t.data.buffer;
    if (buffer instanceof ArrayBuffer && buffer.byteLength > 0) into.add(buffer);
  }
  return into;
}

/** A tensor from a worker, owning its bytes. */
export function tensorFromWire(wire: WireTensor): Tensor {
  return {
    name: wire.name,
    datatype: wire.datatype as Tensor["datatype"],
    shape: wire.shape,
    data: wire.data,
    parameters: {},
    movable: true,
  };
}

/**
 * A tensor for a worker, adding the buffer to move with it to `transfer`: a movable tensor's
 * buffer moves (no copy); any other tensor is copied once, just its bytes (cloning a view would
 * clone its whole buffer; `new Uint8Array(view)` copies, where a Node Buffer's `slice` would not).
 */
export function tensorToWire(tensor: Tensor, transfer: Set<ArrayBuffer>): WireTensor {
  let data = tensor.data;
  if (tensor.movable && data.buffer instanceof ArrayBuffer) transfer.add(data.buffer);
  else {
    data = new Uint8Array(data);
    transfer.add(data.buffer as ArrayBuffer);
  }
  return { name: tensor.name, datatype: tensor.datatype, shape: tensor.shape, data };
}
