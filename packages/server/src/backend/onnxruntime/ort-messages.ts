// The messages between an ONNX Runtime instance (main thread) and its worker thread.
import type { HostToInstance, InstanceToHost } from "../host/host-messages.js";

/** onnxruntime-node's tensor type names. */
export type OrtType =
  | "bool"
  | "uint8"
  | "int8"
  | "uint16"
  | "int16"
  | "uint32"
  | "int32"
  | "uint64"
  | "int64"
  | "float16"
  | "float32"
  | "float64"
  | "string";

/** One tensor crossing the thread boundary; numeric data is a typed array (shared memory in, transferred out). */
export interface WireTensor {
  name: string;
  type: OrtType;
  dims: number[];
  data: ArrayBufferView | string[];
}

export interface OrtSessionSettings {
  intraOpNumThreads?: number;
  interOpNumThreads?: number;
  executionMode?: "sequential" | "parallel";
  graphOptimizationLevel?: "disabled" | "basic" | "extended" | "all";
  enableCpuMemArena?: boolean;
  enableMemPattern?: boolean;
  /** Session config entries, e.g. `{ session: { intra_op: { allow_spinning: "0" } } }`. */
  extra?: Record<string, unknown>;
}

/** A model input or output as the session reports it; a named (symbolic) dimension is a string. */
export interface ValueInfo {
  name: string;
  /** Undefined when the value is not a tensor. */
  type?: string;
  shape: (number | string)[];
}

/** The model's inputs and outputs, as the session reports them. */
export interface SessionIO {
  inputs: ValueInfo[];
  outputs: ValueInfo[];
}

/**
 * What a session answers to a run: its outputs, or the runtime's error. `caught`: the batch was
 * taken while the worker waited hot for it (see `HotWait`).
 */
export type OrtResult = { outputs: WireTensor[]; inferNs: bigint; caught?: boolean } | { error: string };

/** The ONNX Runtime backend's payloads on the instance host's messages (see `InstanceProtocol`). */
export interface OrtProtocol {
  init: { path: string; settings: OrtSessionSettings };
  info: SessionIO;
  /** `hotWaitUs`: how long the worker waits hot for its next batch after this one (0: not at all). */
  batch: { feeds: WireTensor[]; fetches: readonly string[]; hotWaitUs: number };
  result: OrtResult;
  response: never;
  toInstance: never;
  fromInstance: never;
}

export type ToWorker = HostToInstance<OrtProtocol>;
export type FromWorker = InstanceToHost<OrtProtocol>;
