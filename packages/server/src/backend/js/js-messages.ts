// Messages between a scripted-model instance (main thread) and its worker thread. Tensor bytes
// travel in `data` and are moved (transfer list), never copied, where the buffer allows it.

import type { Parameters } from "../../base/tensor.js";
import type { DirectRecord, DirectRoute } from "../backend.js";
import type { HostToInstance, InstanceToHost } from "../host/host-messages.js";
import type { BlsReply, WireBlsRequest, WireError, WireTensor } from "../scripted/bls-wire.js";
import type { TensorErrorTable } from "./js-tensors.js";

export type {
  BlsReply,
  WireBlsRequest,
  WireBlsResponse,
  WireDevice,
  WireError,
  WirePreferredMemory,
  WireTensor,
} from "../scripted/bls-wire.js";
export { tensorFromWire, tensorToWire, transferList } from "../scripted/bls-wire.js";

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
  /**
   * The request is traced: its BLS calls are its trace's children (a direct call's stamped in the
   * worker, see `DirectRecord.trace`).
   */
  traced?: boolean;
  /** Its trace records tensors: its BLS calls take the usual path, where tensors are captured. */
  traceTensors?: boolean;
  /** The W3C context of the request's span as JSON (mode `opentelemetry`). */
  traceContext?: string;
}

export interface WireResponse {
  outputs: WireTensor[];
  parameters: Parameters;
  error?: WireError;
  /** What the model returned instead of a response object (`typeof`, or `null`). */
  notAResponse?: string;
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
    | BlsReply
    /** The answer to a worker's `bls-route`: the model's route now, none when calls must go the usual way. */
    | { kind: "bls-route"; model: string; version: string; route?: DirectRoute }
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
    /** Ask for a model's direct route again (a route in use is renewed in the background). */
    | { kind: "bls-route"; model: string; version: string }
    | { kind: "ready"; probe: number; ready: boolean }
    | { kind: "auto-completed"; config?: Record<string, unknown>; error?: string }
    | { kind: "memory-exceeded"; usedBytes: number }
    | { kind: "log"; level: "info" | "warn" | "error" | "verbose"; message: string };
}

export type ToWorker = HostToInstance<JsProtocol>;
export type FromWorker = InstanceToHost<JsProtocol>;
