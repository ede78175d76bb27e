import { autoCompleteOnnx, findOnnxModelFile, type ModelIO, missingOnnxModelMessage } from "@galley/config";
import { DataType, type ModelConfig, type ModelOutput, type ModelRateLimiter } from "@galley/proto";
import { datatype } from "../../core/datatype.js";
import type { InferenceRequest } from "../../core/inference-request.js";
import { bytesElements, encodeBytesElements, type Tensor } from "../../core/tensor.js";
import type { Logger } from "../../log.js";
import { now } from "../../scheduler/scheduler.js";
import type { Backend, BackendInstance, BackendModel, ExecuteResult } from "../backend.js";
import { gatherInput, scatterOutput, workerView } from "../batch-io.js";
import { checkOutputs, type OutputRules, outputRules } from "../check-outputs.js";
import { OrtSession } from "./ort-instance.js";
import type { OrtSessionSettings, OrtType, ValueInfo, WireTensor } from "./ort-messages.js";

const ORT_TYPES: Record<string, OrtType> = {
  BOOL: "bool",
  UINT8: "uint8",
  INT8: "int8",
  UINT16: "uint16",
  INT16: "int16",
  UINT32: "uint32",
  INT32: "int32",
  UINT64: "uint64",
  INT64: "int64",
  FP16: "float16",
  FP32: "float32",
  FP64: "float64",
  BYTES: "string",
};

const FROM_ORT: Record<string, DataType> = {
  bool: DataType.TYPE_BOOL,
  uint8: DataType.TYPE_UINT8,
  int8: DataType.TYPE_INT8,
  uint16: DataType.TYPE_UINT16,
  int16: DataType.TYPE_INT16,
  uint32: DataType.TYPE_UINT32,
  int32: DataType.TYPE_INT32,
  uint64: DataType.TYPE_UINT64,
  int64: DataType.TYPE_INT64,
  float16: DataType.TYPE_FP16,
  float32: DataType.TYPE_FP32,
  float64: DataType.TYPE_FP64,
  string: DataType.TYPE_STRING,
};

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/** Options for {@link createOnnxRuntimeBackend}. */
export interface OnnxRuntimeBackendOptions {
  /** `--backend-config=onnxruntime,default-max-batch-size=N` (default 4). */
  defaultMaxBatchSize?: number;
  log: Logger;
}

/**
 * Triton's ONNX Runtime backend on onnxruntime-node: `platform: "onnxruntime_onnx"` /
 * `backend: "onnxruntime"`. Each instance is a session in its own worker thread (session.run is
 * a blocking native call), so instances run in parallel and the event loop never waits.
 */
export function createOnnxRuntimeBackend(options: OnnxRuntimeBackendOptions): Backend {
  return {
    name: "onnxruntime",

    async autoComplete(config, modelPath, version) {
      if (config.input.length > 0 && config.output.length > 0) return undefined;
      const path = await findOnnxModelFile(modelPath, version, config);
      let session: OrtSession;
      try {
        session = await OrtSession.open(`${config.name}_autocomplete`, path, { intraOpNumThreads: 1 }, options.log);
      } catch (error) {
        const missing =
          (error as Error).message.includes("No such file") || (error as Error).message.includes("ENOENT");
        const message = missing
          ? missingOnnxModelMessage(path, config)
          : `unable to load model '${config.name}', ${(error as Error).message}`;
        return { config, diagnostics: [{ path: "", message }], notes: [] };
      }
      const io = session.io;
      await session.close();
      try {
        return autoCompleteOnnx(config, toModelIO(io), { defaultMaxBatchSize: options.defaultMaxBatchSize ?? 4 });
      } catch (error) {
        return {
          config,
          diagnostics: [{ path: "", message: `unable to load model '${config.name}', ${(error as Error).message}` }],
          notes: [],
        };
      }
    },

    async load(context) {
      const path = await findOnnxModelFile(context.modelPath, context.version, context.config);
      const settings = sessionSettings(context.config);
      const names = context.config.instanceGroup.flatMap((group) =>
        Array.from({ length: Math.max(1, group.count) }, (_, i) => ({
          name: `${group.name}_${i}`,
          passive: group.passive,
          rateLimiter: group.rateLimiter,
        })),
      );
      const sessions = await Promise.allSettled(names.map((n) => OrtSession.open(n.name, path, settings, context.log)));
      const failed = sessions.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed) {
        await Promise.all(sessions.map((s) => (s.status === "fulfilled" ? s.value.close() : undefined)));
        throw new Error(`unable to load model '${context.config.name}', ${(failed.reason as Error).message}`);
      }
      const opened = sessions.map((s) => (s as PromiseFulfilledResult<OrtSession>).value);
      const instances = opened
        .map((session, i) => new OrtInstance(session, context.config, names[i]?.rateLimiter))
        .filter((_, i) => !names[i]?.passive);
      return {
        instances,
        unload: async () => {
          await Promise.all(opened.map((s) => s.close()));
        },
      } satisfies BackendModel;
    },
  };
}

/** One instance: gathers the batch, runs it in the worker, and splits the outputs per request. */
class OrtInstance implements BackendInstance {
  readonly name: string;
  readonly #batching: boolean;
  readonly #outputs: Map<string, ModelOutput>;
  readonly #inputs: Map<string, ModelConfig["input"][number]>;
  readonly #rules: OutputRules;

  constructor(
    readonly session: OrtSession,
    readonly config: ModelConfig,
    readonly rateLimiter?: ModelRateLimiter,
  ) {
    this.name = session.name;
    this.#batching = config.maxBatchSize > 0;
    this.#outputs = new Map(config.output.map((o) => [o.name, o]));
    this.#inputs = new Map(config.input.map((i) => [i.name, i]));
    this.#rules = outputRules(config);
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    const batchSizes = requests.map((r) => (this.#batching ? (r.inputs[0]?.shape[0] ?? 1) : 1));
    const feeds: WireTensor[] = [];
    const transfer = new Set<ArrayBuffer>();
    try {
      // Config inputs, then what a scheduler added (sequence controls, implicit state).
      const names = new Set([
        ...this.config.input.map((i) => i.name),
        ...requests.flatMap((r) => r.inputs.map((i) => i.name)),
      ]);
      for (const name of names) {
        const tensor = gatherInput(requests, name, this.#batching);
        if (!tensor) continue;
        const spec = this.#inputs.get(name);
        const reshape = spec?.reshape?.shape.map(Number);
        const dims = reshape ? (this.#batching ? [tensor.shape[0] ?? 1, ...reshape] : reshape) : tensor.shape;
        feeds.push(toWire(tensor, dims, transfer));
      }
    } catch (error) {
      return failed(requests, error as Error, now() - start);
    }
    const wanted = new Set<string>();
    for (const request of requests) {
      if (request.outputs.length === 0) for (const name of this.#outputs.keys()) wanted.add(name);
      else for (const o of request.outputs) wanted.add(o.name);
    }
    const inputDone = now();
    let result: { outputs: WireTensor[]; inferNs: bigint };
    try {
      result = await this.session.run(feeds, [...wanted], [...transfer]);
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const inferDone = now();
    const perRequest: Tensor[][] = requests.map(() => []);
    for (const wire of result.outputs) {
      const spec = this.#outputs.get(wire.name);
      const tensor = fromWire(wire, spec, this.#batching);
      for (const [i, part] of scatterOutput(tensor, batchSizes).entries()) perRequest[i]?.push(part);
    }
    const responses = requests.map((request, i) => {
      let outputs = perRequest[i] ?? [];
      if (request.outputs.length > 0) {
        const byName = new Map(outputs.map((o) => [o.name, o]));
        outputs = request.outputs.flatMap((o) => byName.get(o.name) ?? []);
      }
      return checkOutputs(this.#rules, request, outputs) ?? outputs;
    });
    return {
      responses,
      computeInputNs: inputDone - start,
      computeInferNs: inferDone - inputDone,
      computeOutputNs: now() - inferDone,
    };
  }
}

function failed(requests: readonly InferenceRequest[], error: Error, inputNs: bigint): ExecuteResult {
  return { responses: requests.map(() => error), computeInputNs: inputNs, computeInferNs: 0n, computeOutputNs: 0n };
}

function toWire(tensor: Tensor, dims: number[], transfer: Set<ArrayBuffer>): WireTensor {
  const type = ORT_TYPES[tensor.datatype];
  if (!type) throw new Error(`onnxruntime does not support ${tensor.datatype} tensors (input '${tensor.name}')`);
  if (type !== "string") {
    const { view, transfer: buffer } = workerView(tensor);
    transfer.add(buffer);
    return { name: tensor.name, type, dims, data: view };
  }
  try {
    return { name: tensor.name, type, dims, data: bytesElements(tensor.data).map((e) => utf8.decode(e)) };
  } catch {
    throw new Error(`BYTES input '${tensor.name}' is not valid UTF-8; onnxruntime string tensors hold text`);
  }
}

function fromWire(wire: WireTensor, spec: ModelOutput | undefined, batching: boolean): Tensor {
  const protocol = Object.entries(ORT_TYPES).find(([, t]) => t === wire.type)?.[0] ?? "BYTES";
  const info = datatype(protocol);
  let shape = wire.dims;
  if (spec?.reshape) {
    const dims = spec.dims.map(Number);
    const batch = batching ? [wire.dims[0] ?? 1] : [];
    const total = wire.dims.slice(batch.length).reduce((a, b) => a * b, 1);
    const known = dims.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
    shape = [...batch, ...dims.map((d) => (d === -1 ? total / known : d))];
  }
  const data = Array.isArray(wire.data)
    ? encodeBytesElements(wire.data.map((s) => encoder.encode(s)))
    : new Uint8Array(wire.data.buffer, wire.data.byteOffset, wire.data.byteLength);
  return { name: wire.name, datatype: info?.name ?? "BYTES", shape, data, parameters: {}, movable: true };
}

function toModelIO(io: { inputs: ValueInfo[]; outputs: ValueInfo[] }): ModelIO {
  const convert = (v: ValueInfo) => {
    const dataType = v.type ? FROM_ORT[v.type] : undefined;
    if (dataType === undefined) throw new Error(`unsupported datatype ${v.type ?? "(not a tensor)"} for '${v.name}'`);
    return { name: v.name, dataType, dims: v.shape.map((d) => (typeof d === "number" && d >= 0 ? BigInt(d) : -1n)) };
  };
  return { inputs: io.inputs.map(convert), outputs: io.outputs.map(convert) };
}

/**
 * Session options from the config, with Triton's ONNX Runtime parameter names
 * (`intra_op_thread_count`, `inter_op_thread_count`, `execution_mode`, `enable_mem_arena`,
 * `enable_mem_pattern`, `optimization { graph { level } }`), plus `allow_spinning`.
 *
 * Galley's defaults differ from ONNX Runtime's on purpose: one intra-op thread per instance
 * (instances run in parallel, one worker thread each, instead of every session claiming every
 * core) and no spin-waiting between runs (spinning threads compete with the event loop). Set the
 * parameters to get ONNX Runtime's behaviour back.
 */
function sessionSettings(config: ModelConfig): OrtSessionSettings {
  const parameter = (key: string) => config.parameters[key]?.stringValue;
  const int = (key: string) => {
    const value = parameter(key);
    return value === undefined || !/^\d+$/.test(value) ? undefined : Number(value);
  };
  const settings: OrtSessionSettings = { intraOpNumThreads: 1 };
  const intra = int("intra_op_thread_count");
  if (intra !== undefined) settings.intraOpNumThreads = intra;
  const inter = int("inter_op_thread_count");
  if (inter) settings.interOpNumThreads = inter;
  const mode = int("execution_mode");
  if (mode !== undefined) settings.executionMode = mode === 1 ? "parallel" : "sequential";
  const arena = int("enable_mem_arena");
  if (arena !== undefined) settings.enableCpuMemArena = arena !== 0;
  const pattern = int("enable_mem_pattern");
  if (pattern !== undefined) settings.enableMemPattern = pattern !== 0;
  const spinning = int("allow_spinning") ?? 0;
  settings.extra = { session: { intra_op: { allow_spinning: String(spinning === 0 ? 0 : 1) } } };
  const level = config.optimization?.graph?.level;
  if (level !== undefined) settings.graphOptimizationLevel = level < 0 ? "disabled" : level === 1 ? "extended" : "all";
  return settings;
}
