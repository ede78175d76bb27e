/**
 * The API of scripted models (`backend: "js"`), Galley's counterpart of Triton's Python backend.
 * A model is a module in the version folder (`model.js`, `model.mjs` or `model.ts`) whose default
 * export is a class (or an object) implementing {@link Model}. Each instance of the model runs in
 * its own worker thread. Everything here is a type: a model needs no import at run time, only
 * `import type { ... } from "@galley/server/model"`.
 *
 * @packageDocumentation
 * @module @galley/server/model
 */

import type { ProtocolDataType } from "@galley/config";

/** A KServe v2 datatype (`"FP32"`, `"BYTES"`, ...), the config package's vocabulary. */
export type DataType = ProtocolDataType;

/** A request, response or BLS parameter value. */
export type ParameterValue = string | number | bigint | boolean;

/** Data a model may give for an output: typed values, raw little-endian bytes, or BYTES elements. */
export type TensorData =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array
  | readonly (string | Uint8Array)[];

/** An output tensor as a model returns it. `data`'s element count must match `shape`. */
export interface OutputTensor {
  name: string;
  datatype: DataType;
  shape: readonly number[];
  data: TensorData;
  /** Set on a tensor held on a GPU ({@link InputTensor.device}); passed on as it is. */
  device?: DeviceRef;
}

/**
 * Where a tensor held on a GPU lives: a BLS output asked with `preferredMemory: { kind: "gpu" }`
 * from a model that made it on that GPU. Its bytes stay in the server's GPU memory; passing the
 * tensor (or a copy of the object with another `name`) to another call hands it over on the
 * device, returning it as an output sends it to the client. It is held until the requests of the
 * batch that made the call have ended, or until nothing in the model refers to it any more.
 */
export interface DeviceRef {
  readonly deviceId: number;
  readonly byteSize: number;
  /** The server's number for it (opaque). */
  readonly ref: number;
}

/**
 * A tensor as a model receives it: a view of the bytes that arrived (moved into the worker, not
 * copied), with typed accessors that view the same memory.
 */
export interface InputTensor {
  readonly name: string;
  readonly datatype: DataType;
  readonly shape: readonly number[];
  /** The raw bytes: little-endian, row-major; BYTES elements 4-byte-length-prefixed. */
  readonly data: Uint8Array;
  /** The elements as the typed array of the datatype (a view when aligned). @throws for BYTES. */
  typed(): Exclude<TensorData, Uint8Array | readonly (string | Uint8Array)[]> | Uint8Array;
  /** BYTES elements as byte views (no copies). @throws for other datatypes. */
  bytes(): Uint8Array[];
  /** BYTES elements decoded as UTF-8. @throws for other datatypes. */
  strings(): string[];
  /** Set when the tensor is held on a GPU ({@link DeviceRef}): `data` is empty and the accessors throw. */
  readonly device?: DeviceRef;
}

/** A response: outputs (those the request asked for are returned), parameters, or an error. */
export interface Response {
  outputs?: readonly OutputTensor[];
  parameters?: Record<string, ParameterValue>;
  /** Fails this request only (Triton's `InferenceResponse(error=...)`). */
  error?: Error | string;
}

/** Sends a decoupled model's responses for one request; zero or many, then one marked final. */
export interface ResponseSender {
  /**
   * Send a response; `final: true` ends the request. `send(undefined, { final: true })` ends it
   * without a response (a flag-only final, which clients get only if they asked for it).
   */
  send(response?: Response, options?: { final?: boolean }): void;
  /** Whether the client has cancelled the request. */
  isCancelled(): boolean;
}

/** One request handed to `execute`. */
export interface Request {
  /** The client's request id (may be empty). */
  readonly id: string;
  readonly modelName: string;
  readonly modelVersion: string;
  /** The sequence's correlation id (0 when the request is not part of a sequence). */
  readonly correlationId: bigint | string;
  /** SEQUENCE_START = 1, SEQUENCE_END = 2. */
  readonly flags: number;
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  readonly inputs: readonly InputTensor[];
  /** The outputs the client asked for (every output of the model when it named none). */
  readonly requestedOutputNames: readonly string[];
  /** The input of that name, if the request has it. */
  input(name: string): InputTensor | undefined;
  /** Aborted when the client cancels the request (gRPC cancel, closed stream, dropped connection). */
  readonly signal: AbortSignal;
  isCancelled(): boolean;
  /** The response sender (decoupled models; a default-mode model may send exactly one final response). */
  responseSender(): ResponseSender;
  /**
   * The W3C trace context of this request's span when the server traces it in mode
   * `opentelemetry` (Python's `request.trace().get_context()`): headers to hand to a service the
   * model calls, so that its spans join the request's trace. The model's BLS calls are traced as
   * children of the request on their own. Absent when the request is not traced.
   */
  readonly traceContext?: TraceContext;
}

/** W3C trace-context headers (`traceparent`, and `tracestate` when the caller sent one). */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate?: string;
}

/** A request a model sends to another model (BLS). */
export interface BlsRequest {
  model: string;
  /** Empty or absent: the highest ready version. */
  version?: string;
  id?: string;
  inputs: readonly OutputTensor[];
  /** Outputs to return; all when absent. */
  outputs?: readonly string[];
  parameters?: Record<string, ParameterValue>;
  /** `priority` (1 is highest), as a client would set it. */
  priority?: number;
  /** Queue timeout in microseconds, as a client would set it. */
  timeoutMicroseconds?: number;
  /**
   * Where the outputs should be (Triton's `preferred_memory`): `{ kind: "gpu", deviceId }` keeps
   * those a model makes on that GPU there ({@link InputTensor.device}), to hand to the next call
   * without a copy through host memory; from a model elsewhere they come as bytes. Default: bytes.
   */
  preferredMemory?: { kind: "cpu" | "gpu"; deviceId?: number };
  /**
   * Cancels the call. By default the call is cancelled when every request of the batch that is
   * executing when it was made has been cancelled.
   */
  signal?: AbortSignal;
  /**
   * Run the call on one of the model's instances from this model's own thread, without the
   * model's scheduler and without the server's main thread: for calls that are a batch already
   * (users' denoising steps made together), which a dynamic batcher's wait could only delay. The
   * direct calls made to one model in one turn run as one batch (up to its `max_batch_size`). With
   * GPU `preferredMemory`, outputs made on that GPU stay there as tensors this thread holds, which
   * its next direct calls take in place, and a batch whose outputs all stay is answered once its
   * work is queued. Taken where the model allows it (the PyTorch backend, a model that is not
   * decoupled, without sequence batching, response cache or rate limiter) and the call needs
   * nothing it skips (`priority`, `timeoutMicroseconds`, device tensors of the usual path, a
   * request traced with tensors); otherwise the call goes the usual way, as does the first one,
   * whose answer brings the route. The model's statistics count the call as any other. Default
   * false. See docs/guides/scripted-models.md, "Direct calls".
   */
  direct?: boolean;
}

/** A BLS response: its outputs by name, read like inputs. */
export interface BlsResponse {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id: string;
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  readonly outputs: readonly InputTensor[];
  output(name: string): InputTensor | undefined;
}

/** What a model can do besides computing: call other models, log. */
export interface ModelContext {
  /** Call any loaded model, ensembles included, and await its one response. Errors are thrown. */
  infer(request: BlsRequest): Promise<BlsResponse>;
  /** Call a model (typically decoupled) and iterate over its responses; `break` cancels the call. */
  stream(request: BlsRequest): AsyncIterable<BlsResponse>;
  log: {
    info(message: string): void;
    warn(message: string): void;
    error(message: string): void;
    verbose(message: string): void;
  };
}

/** What `initialize` receives, as the Python backend's `args` (every value a string). */
export interface InitializeArgs {
  /** The final model configuration as Triton's JSON. */
  model_config: string;
  model_instance_kind: string;
  model_instance_name: string;
  model_instance_device_id: string;
  model_repository: string;
  model_version: string;
  model_name: string;
}

/** A model config in Triton's JSON form (what `GET /v2/models/<m>/config` returns). */
export type ModelConfigJson = Record<string, unknown>;

/** What `execute` returns: one response per request in default mode, nothing when decoupled. */
// biome-ignore lint/suspicious/noConfusingVoidType: a decoupled model's `async execute` returns Promise<void>.
export type Executed = readonly Response[] | undefined | void;

/**
 * A scripted model. `execute` gets a batch of requests (one unless the config batches) and, in
 * default mode, returns one {@link Response} per request in order. A decoupled model
 * (`model_transaction_policy { decoupled: true }`) sends through each request's
 * {@link Request.responseSender} instead and returns nothing; it may keep sending after
 * `execute` has returned.
 *
 * A class may also have a static `autoCompleteConfig(config: ModelConfigJson): ModelConfigJson`,
 * called once at load (unless `--disable-auto-complete-config`) to fill in the config.
 */
export interface Model {
  initialize?(args: InitializeArgs, context: ModelContext): void | Promise<void>;
  execute(requests: readonly Request[], context: ModelContext): Executed | Promise<Executed>;
  finalize?(): void | Promise<void>;
  /** Consulted by the model readiness endpoints. */
  isReady?(): boolean | Promise<boolean>;
}

/** An error with Triton's status for a failed request (the Python backend's `TritonError`). */
export interface ModelErrorLike extends Error {
  /** `INVALID_ARG`, `NOT_FOUND`, `UNAVAILABLE`, `UNSUPPORTED`, `ALREADY_EXISTS`, `CANCELLED`, `INTERNAL` (default), `UNKNOWN`. */
  code?: string;
}
