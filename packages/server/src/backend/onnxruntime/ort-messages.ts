// The messages between an ONNX Runtime instance (main thread) and its worker thread.

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

export type ToWorker =
  | { kind: "load"; path: string; settings: OrtSessionSettings }
  | { kind: "run"; id: number; feeds: WireTensor[]; fetches: string[] };

/** A model input or output as the session reports it; a named (symbolic) dimension is a string. */
export interface ValueInfo {
  name: string;
  /** Undefined when the value is not a tensor. */
  type?: string;
  shape: (number | string)[];
}

export type FromWorker =
  | { kind: "loaded"; inputs: ValueInfo[]; outputs: ValueInfo[] }
  | { kind: "result"; id: number; outputs: WireTensor[]; inferNs: bigint }
  | { kind: "error"; id?: number; message: string };
