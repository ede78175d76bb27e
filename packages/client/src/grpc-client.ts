import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  type Client,
  Code,
  type CallOptions as ConnectCallOptions,
  ConnectError,
  createClient,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import {
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import {
  fromInferParameters,
  GRPCInferenceService,
  Health,
  HealthCheckResponse_ServingStatus,
  type InferParameter,
  ModelInferRequestSchema,
  type ModelInferResponse,
  type ModelRepositoryParameterSchema,
  toInferParameter,
  toInferParameters,
} from "@galley/proto";
import type {
  CallOptions,
  InferenceClient,
  InferOptions,
  InferResult,
  ModelMetadata,
  ParameterValue,
  ServerMetadata,
} from "./client-types.js";
import { createModelInferCall, type ModelInferCall } from "./grpc-model-infer.js";
import {
  callSignal,
  checkTimeoutMs,
  inferResult,
  outputPlacement,
  outputPlacements,
  requestedOutputs,
  requestParameters,
  sharedMemoryParameters,
} from "./request-parts.js";
import { type RetryOptions, retryInterceptor } from "./retry.js";
import { type DataType, OutputTensor } from "./tensor.js";

/** The wire protocols a Galley (or Triton) gRPC port can speak. Triton itself speaks only `grpc`. */
export type GrpcProtocol = "grpc" | "connect" | "grpc-web";

/**
 * HTTP/2 keepalive: PING frames that keep NATs and load balancers from dropping a connection
 * during a long job, and find a dead one. The defaults suit minute-long inferences (a video
 * model's denoising loop); Triton's server accepts pings every 10 s or slower by default.
 */
export interface KeepaliveOptions {
  /** Ping every this many ms; default 30,000. */
  intervalMs?: number;
  /** Close the connection when a ping is not answered within this many ms; default 5,000. */
  timeoutMs?: number;
  /** Also ping connections with no call in flight; default true. */
  idle?: boolean;
  /** Close a connection idle for this many ms (a new one opens on the next call); default 15 minutes. */
  idleConnectionTimeoutMs?: number;
}

/** Options for {@link createGrpcClient}. */
export interface GrpcClientOptions {
  /** The server's gRPC origin, e.g. `http://localhost:8001`. */
  baseUrl: string;
  /** Default `grpc`, which works against Triton and Galley alike. */
  protocol?: GrpcProtocol;
  keepalive?: KeepaliveOptions;
  /** A deadline for every call, in ms, unless a call gives its own; default none (long jobs). */
  defaultTimeoutMs?: number;
  /** Retries of idempotent calls on UNAVAILABLE; `false` turns them off. */
  retry?: RetryOptions | false;
  /** Headers sent with every call. */
  headers?: Record<string, string>;
  /** `--grpc-restricted-protocol`: sends `triton-grpc-protocol-<key>: <value>`. */
  restrictedProtocol?: { key: string; value: string };
  /** Compress requests with gzip (responses are accepted compressed either way). */
  compression?: "gzip" | "none";
  /**
   * More interceptors, run after the built-in ones. With any, `infer` goes through Connect too
   * (so that they see it), instead of the lean `ModelInfer` path.
   */
  interceptors?: Interceptor[];
}

/** One response on a stream: a result, an error, or (when asked for) the flag-only final. */
export interface StreamResult {
  /** The request's id. */
  id: string;
  modelName: string;
  /** The request's last response. */
  final: boolean;
  result?: InferResult;
  /** The server's error message for this request (the stream goes on). */
  error?: string;
}

/** A bidirectional `ModelStreamInfer` stream: send requests, iterate responses. */
export interface InferStream extends AsyncIterable<StreamResult> {
  /** Send one request. `emptyFinal` asks for the flag-only final response (`triton_enable_empty_final_response`). */
  send(model: string, request: Omit<InferOptions, "signal" | "timeoutMs"> & { emptyFinal?: boolean }): void;
  /** No more requests: the stream ends once every response has arrived. */
  end(): void;
}

/** A client for `inference.GRPCInferenceService` and `grpc.health.v1.Health`. */
export interface GrpcClient extends InferenceClient {
  /** Every RPC of `inference.GRPCInferenceService`, with the generated message types. */
  readonly service: Client<typeof GRPCInferenceService>;
  /** `grpc.health.v1.Health`: `Check` reports server readiness. */
  readonly health: Client<typeof Health>;
  /** grpc.health.v1 Check: true when the server reports SERVING. */
  isServing(options?: CallOptions): Promise<boolean>;
  /** Open a `ModelStreamInfer` stream; aborting `signal` cancels every request on it. */
  stream(options?: { signal?: AbortSignal; headers?: Record<string, string>; closeOnError?: boolean }): InferStream;
  /**
   * One request on a stream of its own: its responses (one for a default-mode model, zero or many
   * for a decoupled one) until the final; errors are thrown. Leaving the loop cancels it.
   */
  streamInfer(model: string, request: InferOptions): AsyncIterable<InferResult>;
}

type InferInit = MessageInitShape<typeof ModelInferRequestSchema>;

function parameters(values: Record<string, ParameterValue>): Record<string, InferParameter> {
  // Triton's clients send `priority` as uint64.
  return toInferParameters(values, ["priority"]);
}

/** A `ModelInferRequest` with `raw_input_contents` (or shared-memory parameters). */
export function grpcInferRequest(model: string, request: InferOptions): InferInit {
  const raw: Uint8Array[] = [];
  const inputs = Object.entries(request.inputs).map(([name, input]) => {
    if ("data" in input) raw.push(input.data);
    return {
      name,
      datatype: input.datatype,
      shape: input.shape.map(BigInt),
      parameters: parameters(sharedMemoryParameters(input)),
    };
  });
  if (raw.length > 0 && raw.length !== inputs.length) {
    throw new TypeError("mixing shared-memory and in-band inputs in one gRPC request is not supported");
  }
  return {
    modelName: model,
    modelVersion: request.version ?? "",
    id: request.id ?? "",
    parameters: parameters(requestParameters(request)),
    inputs,
    outputs: requestedOutputs(request).map((o) => ({
      name: o.name,
      parameters: parameters({
        ...(o.classification !== undefined ? { classification: o.classification } : {}),
        ...sharedMemoryParameters(o),
      }),
    })),
    rawInputContents: raw,
  };
}

/**
 * A `ModelInferResponse` as an {@link InferResult}; with its request, outputs the request placed
 * in shared memory say where they went (their typed views then throw, naming the region).
 */
export function grpcInferResult(response: ModelInferResponse, request?: Pick<InferOptions, "outputs">): InferResult {
  const placements = request ? outputPlacements(request) : undefined;
  const outputs = response.outputs.map(
    (o, i) =>
      new OutputTensor(
        o.name,
        o.datatype as DataType,
        o.shape.map(Number),
        response.rawOutputContents[i] ?? new Uint8Array(0),
        // Only a server's own shared-memory parameters are worth converting.
        outputPlacement(
          o.name,
          placements,
          o.parameters.shared_memory_region ? fromInferParameters(o.parameters) : undefined,
        ),
      ),
  );
  return inferResult(
    {
      modelName: response.modelName,
      modelVersion: response.modelVersion,
      id: response.id,
      parameters: fromInferParameters(response.parameters),
    },
    outputs,
  );
}

/** A call's signal and deadline, as Connect takes them (a deadline fails with DEADLINE_EXCEEDED). */
function connectOptions(options: CallOptions = {}): ConnectCallOptions {
  return {
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.timeoutMs !== undefined ? { timeoutMs: checkTimeoutMs(options.timeoutMs) } : {}),
  };
}

/**
 * Create a gRPC client over HTTP/2, with keepalive pings, retries of idempotent calls and typed
 * tensors.
 *
 * @example
 * const client = createGrpcClient({ baseUrl: "http://localhost:8001" });
 * const result = await client.infer("simple", {
 *   inputs: { INPUT0: tensor.int32([1, 16], a), INPUT1: tensor.int32([1, 16], b) },
 * });
 * result.output("OUTPUT0").int32(); // Int32Array
 */
export function createGrpcClient(options: GrpcClientOptions): GrpcClient {
  checkTimeoutMs(options.defaultTimeoutMs, "defaultTimeoutMs");
  const { transport, sessionManager } = createTransport(options);
  const service = createClient(GRPCInferenceService, transport);
  const health = createClient(Health, transport);
  const opts = connectOptions;
  // ModelInfer carries the tensors: over plain gRPC it skips Connect's machinery (same errors,
  // deadlines, cancellation, headers, compression; see grpc-model-infer.ts). User interceptors
  // only see calls made through Connect, so with any the client keeps to Connect.
  const lean: ModelInferCall | undefined =
    sessionManager && (options.interceptors ?? []).length === 0
      ? createModelInferCall({
          sessionManager,
          baseUrl: options.baseUrl,
          headers: callHeaders(options),
          compression: options.compression ?? "none",
          ...(options.defaultTimeoutMs !== undefined ? { defaultTimeoutMs: options.defaultTimeoutMs } : {}),
        })
      : undefined;

  const client: GrpcClient = {
    service,
    health,
    isServerLive: async (o) => (await service.serverLive({}, opts(o))).live,
    isServerReady: async (o) => (await service.serverReady({}, opts(o))).ready,
    isModelReady: async (name, version = "", o) => (await service.modelReady({ name, version }, opts(o))).ready,
    isServing: async (o) => (await health.check({}, opts(o))).status === HealthCheckResponse_ServingStatus.SERVING,
    serverMetadata: async (o): Promise<ServerMetadata> => {
      const m = await service.serverMetadata({}, opts(o));
      return { name: m.name, version: m.version, extensions: [...m.extensions] };
    },
    modelMetadata: async (name, version = "", o): Promise<ModelMetadata> => {
      const m = await service.modelMetadata({ name, version }, opts(o));
      const tensor = (t: { name: string; datatype: string; shape: bigint[] }) => ({
        name: t.name,
        datatype: t.datatype,
        shape: t.shape.map(Number),
      });
      return {
        name: m.name,
        versions: [...m.versions],
        platform: m.platform,
        inputs: m.inputs.map(tensor),
        outputs: m.outputs.map(tensor),
      };
    },
    modelConfig: async (name, version = "", o) => {
      const { config } = await service.modelConfig({ name, version }, opts(o));
      if (!config) throw new ConnectError(`the server returned no config for '${name}'`, Code.Internal);
      return config;
    },
    statistics: (name = "", version = "", o) => service.modelStatistics({ name, version }, opts(o)),
    infer: async (model, request) =>
      grpcInferResult(
        lean
          ? await lean(create(ModelInferRequestSchema, grpcInferRequest(model, request)), request)
          : await service.modelInfer(grpcInferRequest(model, request), opts(request)),
        request,
      ),
    index: async (o = {}) =>
      (await service.repositoryIndex({ ready: o.ready ?? false }, opts(o))).models.map((m) => ({
        name: m.name,
        version: m.version,
        state: m.state,
        reason: m.reason,
      })),
    load: async (model, o = {}) => {
      const params: Record<string, MessageInitShape<typeof ModelRepositoryParameterSchema>> = {};
      if (o.config !== undefined) {
        const config = typeof o.config === "string" ? o.config : JSON.stringify(o.config);
        params.config = { parameterChoice: { case: "stringParam", value: config } };
      }
      for (const [path, bytes] of Object.entries(o.files ?? {})) {
        params[path] = { parameterChoice: { case: "bytesParam", value: bytes } };
      }
      await service.repositoryModelLoad({ modelName: model, parameters: params }, opts(o));
    },
    unload: async (model, o = {}) => {
      await service.repositoryModelUnload(
        {
          modelName: model,
          parameters: o.dependents
            ? { unload_dependents: { parameterChoice: { case: "boolParam", value: true } } }
            : {},
        },
        opts(o),
      );
    },
    logSettings: async (changes = {}, o) => {
      const settings = Object.fromEntries(
        Object.entries(changes).map(([key, value]) => [
          key,
          {
            parameterChoice:
              typeof value === "boolean"
                ? { case: "boolParam" as const, value }
                : typeof value === "number"
                  ? { case: "uint32Param" as const, value }
                  : { case: "stringParam" as const, value },
          },
        ]),
      );
      const response = await service.logSettings({ settings }, opts(o));
      const out: Record<string, string | number | boolean> = {};
      for (const [key, value] of Object.entries(response.settings)) {
        if (value.parameterChoice.case !== undefined) out[key] = value.parameterChoice.value;
      }
      return out;
    },
    traceSettings: async (changes = {}, o = {}) => {
      const settings = Object.fromEntries(
        Object.entries(changes).map(([key, value]) => [
          key,
          { value: value === null ? [] : typeof value === "string" ? [value] : [...value] },
        ]),
      );
      const response = await service.traceSetting({ settings, modelName: o.model ?? "" }, opts(o));
      const out: Record<string, string | string[]> = {};
      for (const [key, { value }] of Object.entries(response.settings))
        out[key] = key === "trace_level" ? value : (value[0] ?? "");
      return out;
    },
    registerSystemSharedMemory: async (name, key, byteSize, offset = 0, o) => {
      await service.systemSharedMemoryRegister(
        { name, key, byteSize: BigInt(byteSize), offset: BigInt(offset) },
        opts(o),
      );
    },
    unregisterSystemSharedMemory: async (name = "", o) => {
      await service.systemSharedMemoryUnregister({ name }, opts(o));
    },
    systemSharedMemoryStatus: async (name = "", o) =>
      Object.values((await service.systemSharedMemoryStatus({ name }, opts(o))).regions).map((r) => ({
        name: r.name,
        key: r.key,
        offset: Number(r.offset),
        byteSize: Number(r.byteSize),
      })),
    registerCudaSharedMemory: async (name, rawHandle, deviceId, byteSize, o) => {
      await service.cudaSharedMemoryRegister(
        { name, rawHandle, deviceId: BigInt(deviceId), byteSize: BigInt(byteSize) },
        opts(o),
      );
    },
    unregisterCudaSharedMemory: async (name = "", o) => {
      await service.cudaSharedMemoryUnregister({ name }, opts(o));
    },
    cudaSharedMemoryStatus: async (name = "", o) =>
      Object.values((await service.cudaSharedMemoryStatus({ name }, opts(o))).regions).map((r) => ({
        name: r.name,
        deviceId: Number(r.deviceId),
        byteSize: Number(r.byteSize),
      })),
    stream: (o = {}) => openStream(service, o),
    streamInfer: (model, request) => ({
      async *[Symbol.asyncIterator]() {
        const abort = new AbortController();
        const signal = callSignal({
          signal: abort.signal,
          ...(request.timeoutMs !== undefined ? { timeoutMs: request.timeoutMs } : {}),
        });
        const onAbort = () => abort.abort(request.signal?.reason);
        request.signal?.addEventListener("abort", onAbort, { once: true });
        const stream = openStream(service, signal ? { signal } : {});
        stream.send(model, { ...request, emptyFinal: true });
        stream.end();
        let finished = false;
        try {
          for await (const item of stream) {
            // A stream's error carries Triton's message only, not its code.
            if (item.error !== undefined) throw new ConnectError(item.error, Code.Unknown);
            if (item.result) yield item.result;
            if (item.final) {
              finished = true;
              return;
            }
          }
        } finally {
          request.signal?.removeEventListener("abort", onAbort);
          if (!finished) abort.abort();
        }
      },
    }),
    close: () => {
      // connect-node's session manager closes idle connections by itself; nothing is held open
      // here beyond `idleConnectionTimeoutMs`.
    },
  };
  return client;
}

function openStream(
  service: Client<typeof GRPCInferenceService>,
  options: { signal?: AbortSignal; headers?: Record<string, string>; closeOnError?: boolean },
): InferStream {
  const queue: InferInit[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  const requests: AsyncIterable<InferInit> = {
    async *[Symbol.asyncIterator]() {
      for (;;) {
        const next = queue.shift();
        if (next) {
          yield next;
          continue;
        }
        if (ended) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    },
  };
  const headers = { ...(options.headers ?? {}), ...(options.closeOnError ? { triton_grpc_error: "true" } : {}) };
  let responses: AsyncIterable<import("@galley/proto").ModelStreamInferResponse> | undefined;
  return {
    send(model, request) {
      if (ended) throw new Error("the stream was ended");
      const init = grpcInferRequest(model, request);
      if (request.emptyFinal) {
        init.parameters = { ...(init.parameters ?? {}), triton_enable_empty_final_response: toInferParameter(true) };
      }
      queue.push(init);
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    async *[Symbol.asyncIterator]() {
      responses ??= service.modelStreamInfer(requests, {
        ...(options.signal ? { signal: options.signal } : {}),
        headers,
      });
      for await (const message of responses) {
        const response = message.inferResponse;
        const finalParameter = response?.parameters.triton_final_response?.parameterChoice;
        const final = finalParameter?.case === "boolParam" ? finalParameter.value : true;
        const base = { id: response?.id ?? "", modelName: response?.modelName ?? "", final };
        if (message.errorMessage !== "") yield { ...base, final: true, error: message.errorMessage };
        else if (response && response.outputs.length === 0 && final) yield base;
        else if (response) yield { ...base, result: grpcInferResult(response) };
      }
    },
  };
}

/** The headers every call carries: the client's own and the restricted-protocol one. */
function callHeaders(options: GrpcClientOptions): Record<string, string> {
  return {
    ...(options.headers ?? {}),
    ...(options.restrictedProtocol
      ? { [`triton-grpc-protocol-${options.restrictedProtocol.key}`]: options.restrictedProtocol.value }
      : {}),
  };
}

/**
 * The Connect transport of a client; over plain gRPC also its HTTP/2 session manager (keepalive
 * pings, idle close, a new connection after GOAWAY), which the lean ModelInfer path shares, so a
 * client holds one connection.
 */
function createTransport(options: GrpcClientOptions): { transport: Transport; sessionManager?: Http2SessionManager } {
  const keepalive = options.keepalive ?? {};
  const interceptors: Interceptor[] = [];
  const headers = callHeaders(options);
  if (Object.keys(headers).length > 0) {
    interceptors.push((next) => (request) => {
      for (const [key, value] of Object.entries(headers)) request.header.set(key, value);
      return next(request);
    });
  }
  if (options.retry !== false) interceptors.push(retryInterceptor(options.retry ?? {}));
  interceptors.push(...(options.interceptors ?? []));
  const session = {
    pingIntervalMs: keepalive.intervalMs ?? 30_000,
    pingTimeoutMs: keepalive.timeoutMs ?? 5_000,
    pingIdleConnection: keepalive.idle ?? true,
    idleConnectionTimeoutMs: keepalive.idleConnectionTimeoutMs ?? 15 * 60_000,
  };
  const common = {
    baseUrl: options.baseUrl,
    interceptors,
    ...session,
    acceptCompression: [compressionGzip],
    // Triton has no message size limit below 2 GiB; neither does this client.
    readMaxBytes: 0x7fffffff,
    writeMaxBytes: 0x7fffffff,
    ...(options.compression === "gzip" ? { sendCompression: compressionGzip } : {}),
    ...(options.defaultTimeoutMs !== undefined ? { defaultTimeoutMs: options.defaultTimeoutMs } : {}),
  };
  switch (options.protocol ?? "grpc") {
    case "grpc": {
      const sessionManager = new Http2SessionManager(options.baseUrl, session);
      return { transport: createGrpcTransport({ ...common, sessionManager }), sessionManager };
    }
    case "connect":
      return { transport: createConnectTransport({ ...common, httpVersion: "2" }) };
    case "grpc-web":
      return { transport: createGrpcWebTransport({ ...common, httpVersion: "2" }) };
    default:
      throw new TypeError(`unknown protocol '${String(options.protocol)}': expected grpc, connect or grpc-web`);
  }
}
