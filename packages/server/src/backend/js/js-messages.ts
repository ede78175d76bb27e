// Messages between a scripted-model instance (main thread) and its worker thread. Tensor bytes
// travel in `data` and are moved (transfer list), never copied, where the buffer allows it.
import type { Parameters } from "../../core/tensor.js";

export interface WireTensor {
  name: string;
  datatype: string;
  shape: number[];
  data: Uint8Array;
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
}

export interface WireError {
  message: string;
  /** A Triton code (`INVALID_ARG`, ...); INTERNAL when absent. */
  code?: string;
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
}

export interface WireBlsResponse {
  modelName: string;
  modelVersion: string;
  id: string;
  parameters: Parameters;
  outputs: WireTensor[];
}

export interface InitMessage {
  kind: "init";
  file: string;
  args: Record<string, string>;
  decoupled: boolean;
  /** Output names of the model, in config order. */
  outputs: string[];
  /** `memory_limit_mb` in bytes: heap plus external memory (ArrayBuffers) allowed after an execute. */
  memoryLimitBytes?: number;
}

export type ToWorker =
  | InitMessage
  | { kind: "execute"; batch: number; requests: WireRequest[] }
  | { kind: "cancel"; key: number }
  | { kind: "bls-reply"; call: number; response?: WireBlsResponse; error?: WireError; final: boolean }
  | { kind: "is-ready"; probe: number }
  | { kind: "auto-complete"; file: string; config: Record<string, unknown> }
  | { kind: "finalize" };

export type FromWorker =
  | { kind: "initialized" }
  | { kind: "init-failed"; message: string }
  | { kind: "executed"; batch: number; responses?: WireResponse[]; error?: WireError }
  | { kind: "send"; key: number; response?: WireResponse; final: boolean }
  | { kind: "bls"; call: number; request: WireBlsRequest; stream: boolean; parents: number[] }
  | { kind: "bls-cancel"; call: number }
  | { kind: "ready"; probe: number; ready: boolean }
  | { kind: "auto-completed"; config?: Record<string, unknown>; error?: string }
  | { kind: "finalized" }
  | { kind: "memory-exceeded"; usedBytes: number }
  | { kind: "log"; level: "info" | "warn" | "error" | "verbose"; message: string };

/** The buffers a set of tensors can move instead of being copied (each buffer once). */
export function transferList(tensors: readonly WireTensor[], into: Set<ArrayBuffer> = new Set()): Set<ArrayBuffer> {
  for (const t of tensors) {
    const buffer = t.data.buffer;
    if (buffer instanceof ArrayBuffer && buffer.byteLength > 0) into.add(buffer);
  }
  return into;
}
