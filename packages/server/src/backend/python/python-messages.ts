// Messages between a Python-backend instance (main thread) and its stub process, carried as JSON
// frames by the process transport. Tensors travel as references into shared-memory segments
// (`ShmTensor`): the JSON says where the bytes are, never what they are.
import type { Parameters } from "../../base/tensor.js";
import type { HostToInstance, InstanceToHost } from "../host/host-messages.js";
import type { WireDevice, WirePreferredMemory } from "../scripted/bls-wire.js";

/**
 * A tensor whose bytes lie in a segment of the sender: segment number `s` (of `z` bytes), byte
 * offset `o`, `n` bytes (BYTES: Triton's 4-byte length-prefixed serialization). `s` is -1 for no bytes.
 */
export interface ShmTensor {
  name: string;
  datatype: string;
  shape: number[];
  s: number;
  z: number;
  o: number;
  n: number;
  /** 1: the bytes lie in the reader's own segment `s` (an output that is a view of an input). */
  r?: 1;
  /** A tensor held on a GPU for the model (a BLS output, see `BlsCalls`): no bytes here (`s` -1). */
  device?: WireDevice;
  /** A tensor on a GPU shared through CUDA IPC (see `DeviceIpc`): no bytes here (`s` -1). */
  ipc?: IpcTensor;
}

/**
 * Device memory one side lends the other through CUDA IPC (issue 50): the allocation's handle
 * (64 bytes, base64) and the tensor's place in it. `key` is the lender's: the borrower gives it
 * back (`ipc-drop` to the server, `ipc-release` to the stub) once it no longer uses the memory.
 * `server` (from the stub only): the memory is the server's own loan `key`, returned as it came.
 * `event`: the bytes are complete only once it fires.
 */
export interface IpcTensor {
  handle: string;
  offset: number;
  deviceId: number;
  byteSize: number;
  key: number;
  server?: 1;
  /**
   * The CUDA IPC handle (64 bytes, base64) of an event the lender recorded after the work that
   * writes the memory (deferred completion): the borrower's GPU work waits for it, and its host
   * waits for it before copying the bytes.
   */
  event?: string;
}

export interface PyRequest {
  /** The instance's key for the request (routes sends and cancels). */
  key: number;
  id: string;
  correlationId: string | number;
  flags: number;
  /** The client's parameters, as Triton's `parameters()` JSON. */
  parameters: string;
  /** `timeout()`: microseconds, 0 when none. */
  timeout: number;
  inputs: ShmTensor[];
  /** Requested output names; every output of the model when the client named none. */
  outputs: string[];
  cancelled: boolean;
  /** The W3C context of the request's span as JSON (mode `opentelemetry`): `request.trace().get_context()`. */
  traceContext?: string;
}

export interface PyError {
  message: string;
  /** A Triton code (`INVALID_ARG`, ...); INTERNAL when absent. */
  code?: string;
  /** A BLS call refused before its model ran (the stub words it as Triton's request executor). */
  refused?: boolean;
}

export interface PyResponse {
  outputs: ShmTensor[];
  /** The response's parameters (a JSON object). */
  parameters?: Parameters;
  error?: PyError;
}

export interface PyBlsRequest {
  model: string;
  version: string;
  id: string;
  inputs: ShmTensor[];
  outputs: string[];
  parameters: Parameters;
  /** `preferred_memory`; absent: host memory. */
  preferredMemory?: WirePreferredMemory;
  /** `trace=request.trace()`: the key of the request whose trace the call's is a child of. */
  traceParent?: number;
}

/** What a stub is started with. */
export interface PyInit {
  /** The model file (`model.py`). */
  file: string;
  /** What `pb_utils.get_model_dir()` answers: the model's version folder. */
  modelDir: string;
  /** A Python-based backend's folder: `file` is imported from there as its own module, not as `<version>.model`. */
  backendFolder?: string;
  /** `initialize`'s args: Triton's seven keys. */
  args: Record<string, string>;
  decoupled: boolean;
  /** Output names of the model, in config order. */
  outputs: string[];
  /**
   * Triton's `FORCE_CPU_ONLY_INPUT_TENSORS` ("yes", the default: true): false lets inputs on a GPU
   * reach the model there (see `ShmTensor.ipc`) when the stub can map them.
   */
  forceCpuOnlyInputs?: boolean;
  /** The prefix of this instance's segment names under /dev/shm (`triton_python_backend_shm_region_<id>_`). */
  shm: string;
}

/** What a stub answers to a batch: a response per request (none when decoupled), or what `execute` raised. */
export interface PyResult {
  responses?: (PyResponse | null)[];
  /**
   * Non-decoupled requests (indexes) whose final flag comes after `execute` returned: each is
   * answered by one final `response` message (its response, or an error).
   */
  deferred?: number[];
  /**
   * Requests (indexes) the model released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, not
   * answered and not to be: their response senders are closed (see `ExecuteResult.rescheduled`).
   */
  rescheduled?: number[];
  error?: PyError;
  /**
   * With `error`, of a non-decoupled batch: the response the model had sent for a request before
   * `execute` raised (parallel; null where none), and whether its final flag had come too (then the
   * request had ended with it, and keeps it).
   */
  sent?: ({ response: PyResponse; final: boolean } | null)[];
}

/** A custom metric operation (pb_utils.MetricFamily / Metric). */
export type MetricOp =
  | { op: "family"; family: string; description: string; kind: "counter" | "gauge" | "histogram" }
  | { op: "family-delete"; family: string }
  /** `buckets`: a histogram's upper bounds (required for one, refused for the others). */
  | { op: "metric"; family: string; labels: Record<string, string>; buckets?: number[] }
  | { op: "observe"; family: string; labels: Record<string, string>; value: number }
  | { op: "increment"; family: string; labels: Record<string, string>; value: number }
  | { op: "set"; family: string; labels: Record<string, string>; value: number }
  | { op: "value"; family: string; labels: Record<string, string> }
  /** A `Metric` object of a deleted `MetricFamily` (sent without waiting for an answer). */
  | { op: "metric-delete"; family: string; labels: Record<string, string> };

/** `pb_utils.load_model` / `unload_model` / `is_model_ready`. */
export type ModelControlOp =
  | { op: "load"; model: string; config: string; files?: Record<string, string> }
  | { op: "unload"; model: string; unloadDependents: boolean }
  | { op: "ready"; model: string; version: string };

/** The Python backend's messages on top of the instance host's (see `InstanceProtocol`). */
export interface PyProtocol {
  init: PyInit;
  /** `isReady`: the model defines `is_ready()` (without it, a readiness check asks nothing). */
  info: { pid: number; isReady?: boolean; cuda?: boolean };
  /** A batch's requests, and the stub's blocks the server has read since the last message that said so. */
  batch: { requests: PyRequest[]; release: [number, number][] };
  result: PyResult;
  response: PyResponse;
  toInstance:
    | { kind: "bls-reply"; call: number; response?: PyResponse; error?: PyError; final: boolean }
    /** The stub's blocks the server has read: `[segment, offset]` pairs. */
    | { kind: "release"; blocks: [number, number][] }
    | { kind: "reply"; call: number; value?: number | boolean; error?: string }
    /** The stub's device tensors (`IpcTensor.key`) the server no longer uses. */
    | { kind: "ipc-release"; keys: number[] }
    /** The answer to `device-export`: the held tensor lent through CUDA IPC, or why not. */
    | { kind: "device-exported"; call: number; tensor?: IpcTensor; error?: string }
    /** Run the model's `is_ready()`; answered by `ready` with the same probe. */
    | { kind: "is-ready"; probe: number }
    /** Sent alone to a throw-away stub, outside any host. */
    | { kind: "auto-complete"; file: string; modelDir: string; backendFolder?: string; config: string };
  fromInstance:
    | { kind: "bls"; call: number; request: PyBlsRequest; stream: boolean; parents: number[] }
    | { kind: "bls-cancel"; call: number }
    /** Device tensors (`WireDevice.ref`) the model no longer holds. */
    | { kind: "bls-drop"; refs: number[] }
    /** Lend the held device tensor `ref` through CUDA IPC (the model computes on it: `torch.from_dlpack`). */
    | { kind: "device-export"; call: number; ref: number }
    /** The server's device loans (`IpcTensor.key`) the stub no longer uses. */
    | { kind: "ipc-drop"; keys: number[] }
    /** The server's blocks the stub no longer uses. */
    | { kind: "release"; blocks: [number, number][] }
    | { kind: "metric"; call: number; request: MetricOp }
    /** Deletes of metrics and families the model let go (no answer: they come from the garbage collector). */
    | { kind: "metric-drop"; requests: MetricOp[] }
    | { kind: "model-control"; call: number; request: ModelControlOp }
    | { kind: "auto-completed"; config?: string; error?: string }
    /** What `is_ready()` answered, or what it raised (then not ready). */
    | { kind: "ready"; probe: number; ready?: boolean; error?: string }
    | { kind: "log"; level: "info" | "warn" | "error" | "verbose"; message: string };
}

export type ToStub = HostToInstance<PyProtocol>;
export type FromStub = InstanceToHost<PyProtocol>;
