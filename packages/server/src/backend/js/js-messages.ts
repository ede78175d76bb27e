// Messages between a scripted-model instance (main thread) and its worker thread. Tensor bytes
// travel in `data` and are moved (transfer list), never copied, where the buffer allows it.
import type { DirectRecord, DirectRoute } from "../../core/direct-route.js";
import type { Parameters, Tensor } from "../../core/tensor.js";
import type { HostToInstance, InstanceToHost } from "../host/host-messages.js";
import type { TensorErrorTable } from "./js-tensors.js";

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

export interface WireRequest {
  /** The instance's key for the request (routes sends and cancels). */
  key: number;
  id: string;
  modelName: string;
  modelVersion: string;
  parameters: Parameters;
  inputs: WireTensor[];
  /** Requested output names; every output of the model when the client named none. */
  outputs: string[];
  correlationId: bigint | string;
  flags: number;
  cancelled: boolean;
  /** The request is traced: its BLS calls take the usual path, where their traces are made. */
  traced?: boolean;
}

export interface WireError {
  message: string;
  /** A Triton code (`INVALID_ARG`, ...); INTERNAL when absent. */
  code?: string;
  /** The error table's id and values, for the errors the worker itself raises (see `TENSOR_ERROR_IDS`). */
  id?: string;
  values?: Record<string, string | number>;
}

export interface WireResponse {
  outputs: WireTensor[];
  parameters: Parameters;
  error?: WireError;
  /** What the model returned instead of a response object (`typeof`, or `null`). */
  notAResponse?: string;
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

/** What a scripted-model instance is started with. */
export interface JsInit {
  file: string;
  args: Record<string, string>;
  decoupled: boolean;
  /** Output names of the model, in config order. */
  outputs: string[];
  /** `memory_limit_mb` in bytes: heap plus external memory (ArrayBuffers) allowed after an execute. */
  memoryLimitBytes?: number;
  /** The error table's entries the worker raises. */
  errors: TensorErrorTable;
}

/** What an instance answers to a batch: a response per request, or the error `execute` threw. */
export interface JsResult {
  responses?: WireResponse[];
  error?: WireError;
}

/** The js backend's messages on top of the instance host's (see `InstanceProtocol`). */
export interface JsProtocol {
  init: JsInit;
  info: undefined;
  batch: WireRequest[];
  result: JsResult;
  response: WireResponse;
  toInstance:
    | {
        kind: "bls-reply";
        call: number;
        response?: WireBlsResponse;
        error?: WireError;
        final: boolean;
        /** For a call marked `direct`: how the worker runs the next ones itself (see `DirectRoute`). */
        route?: DirectRoute;
      }
    | { kind: "is-ready"; probe: number }
    /** Sent alone to a throw-away worker, outside any host. */
    | { kind: "auto-complete"; file: string; config: Record<string, unknown> };
  fromInstance: /** `parents`: the open requests of the batch making the call; `ownSignal`: the model cancels it itself. */
    | { kind: "bls"; call: number; request: WireBlsRequest; stream: boolean; parents: number[]; ownSignal?: boolean }
    | { kind: "bls-cancel"; call: number }
    /** Device tensors (`WireDevice.ref`) the model no longer holds. */
    | { kind: "bls-drop"; refs: number[] }
    /** A call the worker ran directly, for the target model's statistics. */
    | { kind: "bls-direct"; record: DirectRecord }
    | { kind: "ready"; probe: number; ready: boolean }
    | { kind: "auto-completed"; config?: Record<string, unknown>; error?: string }
    | { kind: "memory-exceeded"; usedBytes: number }
    | { kind: "log"; level: "info" | "warn" | "error" | "verbose"; message: string };
}

export type ToWorker = HostToInstance<JsProtocol>;
export type FromWorker = InstanceToHost<JsProtocol>;

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
