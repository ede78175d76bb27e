import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type GRPCInferenceService,
  type LogSettingsRequest_SettingValue,
  LogSettingsResponseSchema,
  type RepositoryModelLoadRequest,
  TraceSettingResponseSchema,
} from "@galley/proto";
import { InferenceError } from "../../base/errors.js";
import type { Logger } from "../../base/log.js";
import type { InferenceServer, LoadOverrides } from "../../core/inference-server.js";
import type { LogSettingValue } from "../../core/log-settings.js";
import { statisticsResponse } from "../../core/statistics-report.js";
import type { TraceUpdate } from "../../core/trace-settings.js";
import { setTraceNumber, traceLevel, traceNumber } from "../../core/trace-update.js";
import { responseToGrpc } from "./grpc-codec.js";
import type { GrpcFrontendOptions } from "./grpc-options.js";
import { grpcError } from "./grpc-status.js";
import { checkRestricted, modelInfer, streamInfer } from "./model-infer.js";

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
 * `inference.GRPCInferenceService` over one {@link InferenceServer} through connect-node: every RPC,
 * with Triton's semantics and status codes (ModelInfer's and ModelStreamInfer's are
 * `model-infer.ts`'s, shared with the lean calls).
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

    modelInfer: (req, context) =>
      modelInfer(server, req, context.signal, responseToGrpc, undefined, {
        header: (name) => context.requestHeader.get(name) ?? undefined,
      }),

    modelStreamInfer: (requests, context) =>
      streamInfer(server, requests, {
        signal: context.signal,
        closeOnError: context.requestHeader.get("triton_grpc_error") === "true",
        header: { header: (name) => context.requestHeader.get(name) ?? undefined },
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

/** Add the restricted-protocol check and Triton's error mapping to every RPC. */
function wrap(impl: Partial<Impl>, options: GrpcFrontendOptions, log: Logger): Partial<Impl> {
  const wrapped: Record<string, unknown> = {};
  for (const [name, handler] of Object.entries(impl)) {
    const category = CATEGORY[name] ?? "";
    const check = (context: HandlerContext) => checkRestricted(options, category, (h) => context.requestHeader.get(h));
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
