import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type GRPCInferenceService,
  type LogSettingsRequest_SettingValue,
  LogSettingsResponseSchema,
  type ModelInferRequest,
  type ModelInferResponse,
  ModelInferResponseSchema,
  type ModelStreamInferResponse,
  ModelStreamInferResponseSchema,
  type RepositoryModelLoadRequest,
  TraceSettingResponseSchema,
  toInferParameter,
} from "@galley/proto";
import { now } from "../../base/clock.js";
import { hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceRequest, InferenceResponse } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { Trace } from "../../base/trace.js";
import type { InferenceServer, LoadOverrides, ModelView } from "../../core/inference-server.js";
import type { LogSettingValue } from "../../core/log-settings.js";
import { statisticsResponse } from "../../core/statistics-report.js";
import type { TraceUpdate } from "../../core/trace-settings.js";
import { setTraceNumber, traceLevel, traceNumber } from "../../core/trace-update.js";
import { requestFromGrpc, responseToGrpc } from "./grpc-codec.js";
import { grpcError } from "./grpc-status.js";
import { GrpcTrace } from "./grpc-trace.js";

/** gRPC frontend options (tritonserver's `--grpc-*` flags). */
export interface GrpcFrontendOptions {
  /** `--grpc-restricted-protocol=<protocols>:<key>=<value>`: header `triton-grpc-protocol-<key>` required. */
  restricted?: readonly { protocols: readonly string[]; key: string; value: string }[];
  /** `--grpc-keepalive-time` in ms: ping idle connections this often (default 7,200,000). */
  keepaliveTimeMs?: number;
  /** `--grpc-keepalive-timeout` in ms: close a connection whose ping is not answered (default 20,000). */
  keepaliveTimeoutMs?: number;
  /**
   * `--grpc-idle-timeout-secs` in ms: close a connection that has had no open stream this long
   * (default 300,000; 0: never). A stream that stays open, however quiet, keeps its connection.
   */
  idleTimeoutMs?: number;
  /**
   * Close a connection that opens no stream this long after connecting (default 10,000, or the
   * idle limit when shorter; no flag).
   */
  firstStreamTimeoutMs?: number;
  /**
   * `--grpc-max-connections`: calls on a connection past this many are answered UNAVAILABLE and
   * the connection closed (0: no limit; default: half the descriptor limit less 256).
   */
  maxConnections?: number;
}

type Impl = ServiceImpl<typeof GRPCInferenceService>;

/** Which restricted-protocol category each RPC belongs to (Triton's grouping). */
const CATEGORY: Record<string, string> = {
  serverLive: "health",
  serverReady: "health",
  modelReady: "health",
  serverMetadata: "metadata",
  modelMetadata: "metadata",
  modelInfer: "inference",
  modelStreamInfer: "inference",
  modelConfig: "model-config",
  modelStatistics: "statistics",
  repositoryIndex: "model-repository",
  repositoryModelLoad: "model-repository",
  repositoryModelUnload: "model-repository",
  systemSharedMemoryStatus: "shared-memory",
  systemSharedMemoryRegister: "shared-memory",
  systemSharedMemoryUnregister: "shared-memory",
  cudaSharedMemoryStatus: "shared-memory",
  cudaSharedMemoryRegister: "shared-memory",
  cudaSharedMemoryUnregister: "shared-memory",
  traceSetting: "trace",
  logSettings: "logging",
};

/**
 * `inference.GRPCInferenceService` over one {@link InferenceServer}: every RPC, with Triton's
 * semantics and status codes.
 */
export function createInferenceService(server: InferenceServer, options: GrpcFrontendOptions = {}): Partial<Impl> {
  const impl: Partial<Impl> = {
    serverLive: () => ({ live: server.isLive() }),
    serverReady: () => ({ ready: server.isReady() }),
    modelReady: async (req) => ({ ready: await server.modelReady(req.name, req.version) }),
    serverMetadata: () => server.metadata(),
    modelMetadata: (req) => {
      const m = server.modelMetadata(req.name, req.version);
      const tensor = (t: { name: string; datatype: string; shape: number[] }) => ({ ...t, shape: t.shape.map(BigInt) });
      return { ...m, inputs: m.inputs.map(tensor), outputs: m.outputs.map(tensor) };
    },
    modelConfig: (req) => ({ config: server.modelConfig(req.name, req.version) }),
    modelStatistics: (req) => statisticsResponse(server.statistics(req.name, req.version)),

    modelInfer: (req, context) => inferConnect(server, req, context.signal),

    modelStreamInfer: (requests, context) =>
      streamInfer(server, requests, {
        signal: context.signal,
        closeOnError: context.requestHeader.get("triton_grpc_error") === "true",
      }),

    repositoryIndex: async (req) => ({
      models: (await server.repositoryIndex(req.ready, req.repositoryName)).map((e) => ({
        version: "",
        state: "",
        reason: "",
        ...e,
      })),
    }),
    repositoryModelLoad: async (req) => {
      await server.loadModel(req.modelName, req.repositoryName, () => loadOverrides(req.parameters));
      return {};
    },
    repositoryModelUnload: async (req) => {
      await server.unloadModel(req.modelName, req.repositoryName, () => {
        const dependents = req.parameters.unload_dependents?.parameterChoice;
        return dependents?.case === "boolParam" && dependents.value;
      });
      return {};
    },

    systemSharedMemoryStatus: (req) => ({
      regions: Object.fromEntries(
        server.sharedMemory
          .status(req.name)
          .map((r) => [r.name, { name: r.name, key: r.key, offset: BigInt(r.offset), byteSize: BigInt(r.byteSize) }]),
      ),
    }),
    systemSharedMemoryRegister: async (req) => {
      await server.sharedMemory.register(req.name, req.key, Number(req.offset), Number(req.byteSize));
      return {};
    },
    systemSharedMemoryUnregister: async (req) => {
      await server.sharedMemory.unregister(req.name);
      return {};
    },
    cudaSharedMemoryStatus: (req) => ({
      regions: Object.fromEntries(
        server.sharedMemory
          .cudaStatus(req.name)
          .map((r) => [r.name, { name: r.name, deviceId: BigInt(r.deviceId), byteSize: BigInt(r.byteSize) }]),
      ),
    }),
    cudaSharedMemoryRegister: async (req) => {
      await server.sharedMemory.registerCuda(req.name, req.rawHandle, req.deviceId, req.byteSize);
      return {};
    },
    cudaSharedMemoryUnregister: async (req) => {
      await server.sharedMemory.unregister(req.name, "cuda");
      return {};
    },
    traceSetting: (req) => {
      // No settings: a read. A list with no values clears the setting (JSON's `null`).
      const entries = Object.entries(req.settings);
      const report =
        entries.length === 0
          ? server.traceSettings(req.modelName)
          : server.traceSettings(req.modelName, () => traceChange(entries.map(([k, v]) => [k, v.value])));
      return create(TraceSettingResponseSchema, {
        settings: Object.fromEntries(
          Object.entries(report).map(([key, value]) => [key, { value: Array.isArray(value) ? value : [value] }]),
        ),
      });
    },
    logSettings: (req) => {
      const changes: Record<string, LogSettingValue> = {};
      for (const [key, value] of Object.entries(req.settings)) {
        const choice = (value as LogSettingsRequest_SettingValue).parameterChoice;
        if (choice.case !== undefined) changes[key] = choice.value;
      }
      const settings = server.logSettings(changes);
      return create(LogSettingsResponseSchema, {
        settings: Object.fromEntries(
          Object.entries(settings).map(([key, value]) => [
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
        ),
      });
    },
  };
  return wrap(impl, options, server.log);
}

/** A TraceSetting request's settings as a change, with Triton's gRPC texts. */
function traceChange(entries: readonly (readonly [string, readonly string[]])[]): TraceUpdate {
  const change: TraceUpdate = {};
  if (entries.some(([name]) => name === "trace_file")) throw new InferenceError("TRACE_FILE_UNSUPPORTED");
  for (const [name, values] of entries) {
    if (name === "trace_level") {
      if (values.length === 0) change.level = null;
      else {
        const level = traceLevel(values);
        if (level !== undefined) change.level = level;
      }
    } else if (name === "trace_rate" || name === "trace_count" || name === "log_frequency") {
      if (values.length > 1)
        throw new InferenceError("BAD_TRACE_SETTING", { message: `expect only 1 value for '${name}'` });
      const value = values[0];
      setTraceNumber(change, name, value === undefined ? null : traceNumber(name, value, "grpc"));
    }
  }
  return change;
}

/** `ModelInfer`'s semantics, shared by connect-node's route and the lean path in `unary-infer.ts`. */
export async function inferUnary(
  server: InferenceServer,
  req: ModelInferRequest,
  signal: AbortSignal,
  trace?: Trace,
): Promise<ModelInferResponse> {
  return responseToGrpc(await inferUnaryCore(server, req, signal, trace));
}

/** {@link inferUnary}'s core response, before it becomes a `ModelInferResponse`. */
export async function inferUnaryCore(
  server: InferenceServer,
  req: ModelInferRequest,
  signal: AbortSignal,
  trace?: Trace,
): Promise<InferenceResponse> {
  const model = unaryModel(server, req.modelName, req.modelVersion);
  const request = requestFromGrpc(req, signal);
  if (trace) request.trace = trace;
  return server.infer(request, model);
}

/** The same for a request already decoded to a core request (`leanRequestFromGrpc`). */
export async function inferDecoded(
  server: InferenceServer,
  decoded: InferenceRequest,
  signal: AbortSignal,
  trace?: Trace,
): Promise<InferenceResponse> {
  const model = unaryModel(server, decoded.modelName, decoded.modelVersion);
  const request: InferenceRequest = { ...decoded, signal };
  if (trace) request.trace = trace;
  return server.infer(request, model);
}

/** The model a unary ModelInfer names, checked before its request is converted (Triton's order of errors). */
function unaryModel(server: InferenceServer, name: string, version: string): ModelView {
  if (!server.accepting) throw new InferenceError("SHUTTING_DOWN_GRPC");
  const model = server.model(name, version);
  if (model.decoupled) throw new InferenceError("DECOUPLED_GRPC");
  return model;
}

/** ModelInfer through connect-node (gRPC-Web, Connect): traced without the frontend's timestamps. */
async function inferConnect(server: InferenceServer, req: ModelInferRequest, signal: AbortSignal) {
  const trace = server.tracing.sample(req.modelName);
  if (!trace) return inferUnary(server, req, signal);
  try {
    const response = await inferUnary(server, req, signal, trace);
    trace.capture("INFER_RESPONSE_COMPLETE");
    return response;
  } finally {
    trace.end();
  }
}

/**
 * The header a restricted RPC is missing (`--grpc-restricted-protocol`), or undefined when the
 * call may go on. `rpc` is the method's local name, e.g. `modelInfer`.
 */
export function restrictedHeader(
  options: GrpcFrontendOptions,
  rpc: string,
  header: (name: string) => string | null | undefined,
): string | undefined {
  const category = CATEGORY[rpc] ?? "";
  const rule = options.restricted?.find((r) => r.protocols.includes(category));
  if (!rule) return undefined;
  const name = `triton-grpc-protocol-${rule.key}`;
  return header(name) === rule.value ? undefined : name;
}

/** A ModelLoad's parameters: `config` as a string, `file:` contents as bytes, nothing else. */
function loadOverrides(parameters: RepositoryModelLoadRequest["parameters"]): LoadOverrides {
  let config: string | undefined;
  const files = new Map<string, Uint8Array>();
  for (const [name, parameter] of Object.entries(parameters)) {
    const choice = parameter.parameterChoice;
    if (name === "config" && choice.case === "stringParam") config = choice.value;
    else if (name.startsWith("file:") && choice.case === "bytesParam") files.set(name, choice.value);
    else throw new InferenceError("BAD_LOAD_PARAMETER", { name, type: typeName(choice.case) });
  }
  return { ...(config !== undefined ? { config } : {}), files };
}

function typeName(kind: string | undefined): string {
  return { boolParam: "BOOL", int64Param: "INT", stringParam: "STRING", bytesParam: "BYTES" }[kind ?? ""] ?? "UNKNOWN";
}

/**
 * ModelStreamInfer (PROTOCOL.md §9.1): requests on one stream are served concurrently. A
 * default-mode model's response is written in the order the requests arrived; a decoupled
 * model's responses are written as they are produced. Every response carries
 * `triton_final_response`; a flag-only final is sent only to a request that set
 * `triton_enable_empty_final_response`. An error answers its request only, unless the stream was
 * opened with the `triton_grpc_error: true` header: then the first error ends the stream with its
 * status.
 */
export async function* streamInfer(
  server: InferenceServer,
  requests: AsyncIterable<ModelInferRequest>,
  context: { signal: AbortSignal; closeOnError: boolean },
): AsyncGenerator<ModelStreamInferResponse> {
  const { closeOnError } = context;
  /** Default-mode responses wait here for the requests before them; decoupled ones do not. */
  const slots: { message?: ModelStreamInferResponse }[] = [];
  const ready: ModelStreamInferResponse[] = [];
  let fatal: unknown;
  let wake: (() => void) | undefined;
  let pending = 0;
  let inputDone = false;
  const notify = () => wake?.();
  const flushSlots = () => {
    while (slots.length > 0 && slots[0]?.message)
      ready.push((slots.shift() as { message: ModelStreamInferResponse }).message);
    notify();
  };
  const final = (value: boolean) => ({ triton_final_response: toInferParameter(value) });
  /** Traced requests' messages not yet written, and whether each is the request's last. */
  const traced = new Map<ModelStreamInferResponse, { trace: GrpcTrace; last: boolean }>();
  const openTraces = new Set<GrpcTrace>();
  const finish = (trace: GrpcTrace) => {
    openTraces.delete(trace);
    trace.end();
  };

  const serve = async (req: ModelInferRequest, readStart: bigint, readEnd: bigint) => {
    let model: ModelView | undefined;
    let slot: { message?: ModelStreamInferResponse } | undefined;
    const sampled = server.tracing.sample(req.modelName);
    const trace = sampled && new GrpcTrace(sampled, readStart, readEnd);
    if (trace) openTraces.add(trace);
    const follow = (message: ModelStreamInferResponse, last: boolean) => {
      if (!trace) return;
      trace.responded();
      traced.set(message, { trace, last });
    };
    try {
      if (!server.accepting) throw new InferenceError("SHUTTING_DOWN_GRPC");
      model = server.model(req.modelName, req.modelVersion);
      if (!model.decoupled) {
        slot = {};
        slots.push(slot);
      }
      const emptyFinal = req.parameters.triton_enable_empty_final_response?.parameterChoice;
      const wantEmptyFinal = emptyFinal?.case === "boolParam" && emptyFinal.value;
      const request = requestFromGrpc(req, context.signal);
      if (trace) request.trace = trace.trace;
      for await (const item of server.stream(request, model)) {
        if (item.empty && !wantEmptyFinal) continue;
        const response = item.empty
          ? create(ModelInferResponseSchema, {
              id: req.id,
              modelName: item.response.modelName,
              modelVersion: item.response.modelVersion,
            })
          : responseToGrpc(item.response);
        Object.assign(response.parameters, final(item.final));
        // As create(ModelStreamInferResponseSchema, { inferResponse: response }) gives it, without its reflection.
        const message: ModelStreamInferResponse = {
          $typeName: "inference.ModelStreamInferResponse",
          errorMessage: "",
          inferResponse: response,
        };
        follow(message, item.final);
        if (slot) {
          slot.message = message;
          flushSlots();
        } else {
          ready.push(message);
          notify();
        }
      }
    } catch (error) {
      if (closeOnError) {
        fatal ??= error;
        notify();
        return;
      }
      const failure = toInferenceError(error);
      const hidden = hiddenCause(failure);
      if (hidden !== undefined) server.log.error(`gRPC ModelStreamInfer: ${hidden}`);
      const message = create(ModelStreamInferResponseSchema, {
        errorMessage: failure.message,
        inferResponse: {
          id: req.id,
          modelName: req.modelName,
          modelVersion: req.modelVersion,
          ...(model?.decoupled ? { parameters: final(true) } : {}),
        },
      });
      follow(message, true);
      if (slot) {
        slot.message = message;
        flushSlots();
      } else {
        ready.push(message);
        notify();
      }
    } finally {
      // Ends here when no message of it is left to write (else when its last one is written).
      if (trace && ![...traced.values()].some((t) => t.trace === trace)) finish(trace);
    }
  };

  const consume = (async () => {
    let readStart = now();
    for await (const req of requests) {
      pending++;
      void serve(req, readStart, now()).finally(() => {
        pending--;
        notify();
      });
      readStart = now();
    }
  })().then(
    () => {
      inputDone = true;
      notify();
    },
    (error: unknown) => {
      inputDone = true;
      fatal ??= error;
      notify();
    },
  );
  try {
    while (true) {
      if (fatal !== undefined) throw fatal;
      const next = ready.shift();
      if (next) {
        const followed = traced.get(next);
        if (!followed) {
          yield next;
          continue;
        }
        followed.trace.mark("GRPC_SEND_START");
        yield next;
        followed.trace.mark("GRPC_SEND_END");
        // Deleted only now: until it is written, the request's own end leaves its trace open.
        traced.delete(next);
        if (followed.last) finish(followed.trace);
        continue;
      }
      if (inputDone && pending === 0) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
    await consume;
  } finally {
    // Requests whose last message was never written (the stream ended, an empty final not sent).
    for (const trace of openTraces) trace.end();
  }
}

/** Add the restricted-protocol check and Triton's error mapping to every RPC. */
function wrap(impl: Partial<Impl>, options: GrpcFrontendOptions, log: Logger): Partial<Impl> {
  const wrapped: Record<string, unknown> = {};
  for (const [name, handler] of Object.entries(impl)) {
    const check = (context: HandlerContext) => {
      const header = restrictedHeader(options, name, (h) => context.requestHeader.get(h));
      if (header) throw new InferenceError("RESTRICTED_GRPC", { header });
    };
    const fn = handler as (req: unknown, context: HandlerContext) => unknown;
    wrapped[name] =
      name === "modelStreamInfer"
        ? async function* (req: unknown, context: HandlerContext) {
            try {
              check(context);
              yield* fn(req, context) as AsyncIterable<unknown>;
            } catch (error) {
              throw grpcError(error, log);
            }
          }
        : async (req: unknown, context: HandlerContext) => {
            try {
              check(context);
              return await fn(req, context);
            } catch (error) {
              throw grpcError(error, log);
            }
          };
  }
  return wrapped as Partial<Impl>;
}
