import { stat } from "node:fs/promises";
import { createRequire } from "node:module";
import { autoCompleteOnnx, findOnnxModelFile, type ModelIO, missingOnnxModelMessage } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { Logger } from "../../base/log.js";
import type { Backend, BackendModel } from "../backend.js";
import { instanceSpecs, wholeNumberParameter } from "../instance-specs.js";
import { inlineSessionsAvailable, openInlineSession } from "./inline-session.js";
import { INLINE_MAX_FILE_BYTES, OrtInstance } from "./ort-instance.js";
import type { OrtSessionSettings, SessionIO, ValueInfo } from "./ort-messages.js";
import { keepOrtTelemetryOff, ORT_TELEMETRY_VARIABLE } from "./ort-telemetry.js";
import { FROM_ORT } from "./ort-tensors.js";

/** Options for {@link createOnnxRuntimeBackend}. */
export interface OnnxRuntimeBackendOptions {
  /** `--backend-config=onnxruntime,default-max-batch-size=N` (default 4). */
  defaultMaxBatchSize?: number;
  log: Logger;
}

/** The largest `worker_hot_wait_us` (one second): a longer hot wait would keep a core busy between calls that are not. */
export const MAX_WORKER_HOT_WAIT_US = 1_000_000;

/**
 * Triton's ONNX Runtime backend on onnxruntime-node: `platform: "onnxruntime_onnx"` /
 * `backend: "onnxruntime"`. onnxruntime-node's `run` is a blocking native call, so each instance
 * runs a batch on the event loop only when its measured run time is within `inline_max_run_us`
 * (100 µs by default), and otherwise in a worker thread of its own (see `OrtInstance`).
 * ONNX Runtime's telemetry is turned off for the process unless `ORT_DISABLE_TELEMETRY` says
 * otherwise (see `keepOrtTelemetryOff`).
 */
export function createOnnxRuntimeBackend(options: OnnxRuntimeBackendOptions): Backend {
  if (keepOrtTelemetryOff()) {
    options.log.info(
      `ONNX Runtime telemetry is on (${ORT_TELEMETRY_VARIABLE}=${process.env[ORT_TELEMETRY_VARIABLE]}): onnxruntime writes .ses and mat-debug-<pid>.log files into the temp folder`,
    );
  }
  return {
    name: "onnxruntime",

    async autoComplete(config, modelPath, version) {
      if (config.input.length > 0 && config.output.length > 0) return undefined;
      const missing = onnxRuntimeMissing();
      if (missing)
        return {
          config,
          diagnostics: [{ path: "", message: `unable to load model '${config.name}', ${missing}` }],
          notes: [],
        };
      const path = await findOnnxModelFile(modelPath, version, config);
      let io: SessionIO;
      try {
        io = await readSessionIO(path, config, options.log);
      } catch (error) {
        const missing =
          (error as Error).message.includes("No such file") || (error as Error).message.includes("ENOENT");
        const message = missing
          ? missingOnnxModelMessage(path, config)
          : `unable to load model '${config.name}', ${(error as Error).message}`;
        return { config, diagnostics: [{ path: "", message }], notes: [] };
      }
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
      const missing = onnxRuntimeMissing();
      if (missing) throw new Error(`unable to load model '${context.config.name}', ${missing}`);
      const path = await findOnnxModelFile(context.modelPath, context.version, context.config);
      const settings = sessionSettings(context.config);
      const inlineMaxRunUs = wholeNumberParameter(context.config, "inline_max_run_us");
      const workerHotWaitUs = wholeNumberParameter(context.config, "worker_hot_wait_us");
      if (workerHotWaitUs !== undefined && workerHotWaitUs > MAX_WORKER_HOT_WAIT_US) {
        throw new Error(
          `parameter 'worker_hot_wait_us' of model '${context.config.name}' must be at most ${MAX_WORKER_HOT_WAIT_US}, got '${workerHotWaitUs}'`,
        );
      }
      const names = instanceSpecs(context.config);
      const started = await Promise.allSettled(
        names.map((n) =>
          OrtInstance.start({
            name: n.name,
            config: context.config,
            path,
            settings,
            log: context.log,
            rateLimiter: n.rateLimiter,
            signal: context.signal,
            inlineMaxRunUs,
            workerHotWaitUs,
          }),
        ),
      );
      const opened = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed) {
        await Promise.all(opened.map((i) => i.close()));
        throw new Error(`unable to load model '${context.config.name}', ${(failed.reason as Error).message}`);
      }
      return {
        instances: opened.filter((_, i) => !names[i]?.passive),
        healthy: () => opened.every((i) => i.healthy),
        unload: async () => {
          await Promise.all(opened.map((i) => i.close()));
        },
      } satisfies BackendModel;
    },
  };
}

/**
 * Why onnxruntime-node cannot be used, or undefined. Only the sessions' worker threads import it,
 * when a model needs it: the server runs without it, and such a load fails with this message
 * (which `galley config validate` reports too).
 */
export function onnxRuntimeMissing(): string | undefined {
  try {
    createRequire(import.meta.url).resolve("onnxruntime-node");
    return undefined;
  } catch {
    return "the ONNX Runtime backend needs onnxruntime-node, which is not installed: npm install onnxruntime-node";
  }
}

/**
 * The model's inputs and outputs, for auto-complete: from a session loaded on this thread when
 * the file is small (a few milliseconds, no thread), else from one in a worker thread.
 */
async function readSessionIO(path: string, config: ModelConfig, log: Logger): Promise<SessionIO> {
  if (inlineSessionsAvailable() && (await stat(path)).size <= INLINE_MAX_FILE_BYTES) {
    const session = openInlineSession(path, { intraOpNumThreads: 1 });
    const { io } = session;
    session.release();
    return io;
  }
  const instance = await OrtInstance.start({
    name: `${config.name}_autocomplete`,
    config,
    path,
    settings: { intraOpNumThreads: 1 },
    log,
    inlineMaxRunUs: 0,
  });
  const { io } = instance;
  await instance.close();
  return io;
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
