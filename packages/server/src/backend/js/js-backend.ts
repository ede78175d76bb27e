import { access } from "node:fs/promises";
import { join } from "node:path";
import { fromModelConfigJson, toModelConfigJson } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import type { Logger } from "../../base/log.js";
import type { Backend, BackendModel } from "../backend.js";
import { outputRules } from "../batch-io.js";
import type { TransportFactory } from "../host/instance-transport.js";
import { SharedThreads } from "../host/shared-threads.js";
import { workerTransport } from "../host/worker-transport.js";
import { initializeArgs, instanceSpecs, wholeNumberParameter } from "../instance-specs.js";
import type { InferencePath } from "../scripted/bls-calls.js";
import { JS_WORKER_URL, JsInstance } from "./js-instance.js";
import type { FromWorker, ToWorker } from "./js-messages.js";

/** Files a version folder may hold the model in, in the order they are looked for. */
export const JS_MODEL_FILES: readonly string[] = ["model.js", "model.mjs", "model.ts"];

/** How long an `execute` may run when the model sets no `execute_timeout_ms`. */
export const DEFAULT_EXECUTE_TIMEOUT_MS = 60_000;
/** How long `initialize` (with the module's import) may run when the model sets no `initialize_timeout_ms`. */
export const DEFAULT_INITIALIZE_TIMEOUT_MS = 120_000;

/** Options for {@link createJsBackend}. */
export interface JsBackendOptions {
  log: Logger;
  /** The server's inference path, for BLS calls (the core; given late because it is built after the backends). */
  inference: () => InferencePath;
  /** `execute_timeout_ms` for models that set none (default {@link DEFAULT_EXECUTE_TIMEOUT_MS}; 0: none). */
  executeTimeoutMs?: number;
  /** `initialize_timeout_ms` for models that set none (default {@link DEFAULT_INITIALIZE_TIMEOUT_MS}; 0: none). */
  initializeTimeoutMs?: number;
  /**
   * `isolation` for models that set none (`--backend-config js,default-isolation=...`; default
   * `thread`); a model with `memory_limit_mb` and no `isolation` of its own gets `thread`.
   */
  defaultIsolation?: JsIsolation;
  /**
   * How long an unload waits for the requests in flight before it stops the workers still
   * executing, failing their requests (`--exit-timeout-secs`; default: as long as they run).
   */
  unloadTimeoutMs?: number;
}

/**
 * Where a scripted model's instances run: `thread`, a worker thread (and V8 isolate) each; or
 * `shared`, instance n of every such model on shared thread n (see `SharedThreads`).
 */
export type JsIsolation = "thread" | "shared";

/**
 * The `js` backend: scripted models in JavaScript or TypeScript, one worker thread per instance
 * (see `src/model/api.ts` for what a model implements). Parameters (`parameters { key: ... }`):
 * `memory_limit_mb` (the worker's heap and ArrayBuffers together; exceeding it restarts the
 * instance), `execute_timeout_ms` (an execute that runs longer restarts the instance) and
 * `initialize_timeout_ms` (a load whose `initialize` runs longer fails); 0 turns a timeout off;
 * `isolation` (`thread` or `shared`, see {@link JsIsolation}; `memory_limit_mb` needs `thread`).
 * Every response's outputs are checked against the config (see `checkOutputs`).
 */
export function createJsBackend(options: JsBackendOptions): Backend {
  const shared = new SharedThreads({ entry: JS_WORKER_URL, name: "js:shared" });
  return {
    name: "js",

    async autoComplete(config, modelPath, version) {
      const file = await findModelFile(modelPath, version, config);
      if (!file) return undefined;
      // Bad values of these parameters fail the load, which words the error.
      let isolation: JsIsolation = options.defaultIsolation ?? "thread";
      let timeoutMs = options.initializeTimeoutMs ?? DEFAULT_INITIALIZE_TIMEOUT_MS;
      try {
        isolation = isolationOf(config, wholeNumberParameter(config, "memory_limit_mb"), options);
        timeoutMs = initializeTimeout(config, options);
      } catch {}
      const open =
        isolation === "shared"
          ? shared.transport<ToWorker, FromWorker>(0)
          : workerTransport<ToWorker, FromWorker>({ entry: JS_WORKER_URL, name: `js:${config.name}_autocomplete` });
      const completed = await runAutoComplete(file, config, open, timeoutMs);
      if (typeof completed === "string") {
        return {
          config,
          diagnostics: [{ path: "", message: `unable to auto-complete model '${config.name}': ${completed}` }],
          notes: [],
        };
      }
      return { config: completed, diagnostics: [], notes: ["autoCompleteConfig"] };
    },

    async load(context): Promise<BackendModel> {
      const { config } = context;
      const file = await findModelFile(context.modelPath, context.version, config);
      if (!file) {
        const names = config.defaultModelFilename ? [config.defaultModelFilename] : JS_MODEL_FILES;
        throw new Error(
          `unable to find ${names.map((n) => `'${join(context.versionPath, n)}'`).join(" or ")} for model '${config.name}'`,
        );
      }
      const parameter = (key: string) => wholeNumberParameter(config, key);
      const memoryLimitMb = parameter("memory_limit_mb");
      const isolation = isolationOf(config, memoryLimitMb, options);
      if (isolation === "shared" && memoryLimitMb) {
        throw new Error(
          `parameter 'memory_limit_mb' of model '${config.name}' needs isolation 'thread': a shared thread's memory cannot be limited per instance`,
        );
      }
      const executeTimeoutMs =
        parameter("execute_timeout_ms") ?? options.executeTimeoutMs ?? DEFAULT_EXECUTE_TIMEOUT_MS;
      const initializeTimeoutMs = initializeTimeout(config, options);
      const rules = outputRules(config);
      const modelConfig = JSON.stringify(toModelConfigJson(config));
      const specs = instanceSpecs(config);
      const started = await Promise.allSettled(
        specs.map((spec, index) =>
          JsInstance.start({
            name: spec.name,
            ...(isolation === "shared" ? { thread: shared.transport(index) } : {}),
            init: {
              file,
              decoupled: config.modelTransactionPolicy?.decoupled ?? false,
              outputs: config.output.map((o) => o.name),
              args: initializeArgs(config, spec, modelConfig, context),
            },
            outputRules: rules,
            depth: instanceDepth(config),
            ...(memoryLimitMb ? { memoryLimitMb } : {}),
            executeTimeoutMs,
            initializeTimeoutMs,
            ...(context.signal ? { signal: context.signal } : {}),
            ...(spec.rateLimiter ? { rateLimiter: spec.rateLimiter } : {}),
            inference: options.inference,
            log: options.log,
          }),
        ),
      );
      const opened = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed) {
        await Promise.all(opened.map((i) => i.close()));
        throw new Error(`unable to load model '${config.name}': ${(failed.reason as Error).message}`);
      }
      return {
        instances: opened.filter((_, i) => !specs[i]?.passive),
        async isReady() {
          const answers = await Promise.all(opened.map((i) => i.isReady()));
          return answers.every(Boolean);
        },
        healthy: () => opened.every((i) => i.healthy),
        ...(options.unloadTimeoutMs !== undefined ? { unloadTimeoutMs: options.unloadTimeoutMs } : {}),
        async unload() {
          await Promise.all(opened.map((i) => i.close()));
        },
      };
    },
  };
}

/** `initialize_timeout_ms`: the model's, else the backend's default. */
function initializeTimeout(config: ModelConfig, options: JsBackendOptions): number {
  return (
    wholeNumberParameter(config, "initialize_timeout_ms") ??
    options.initializeTimeoutMs ??
    DEFAULT_INITIALIZE_TIMEOUT_MS
  );
}

/**
 * Where the model's instances run: its own `isolation`, else `thread` when it has a memory limit
 * (which needs a thread of its own), else the backend's default.
 */
function isolationOf(config: ModelConfig, memoryLimitMb: number | undefined, options: JsBackendOptions): JsIsolation {
  return isolationParameter(config) ?? (memoryLimitMb ? "thread" : (options.defaultIsolation ?? "thread"));
}

/** The `isolation` parameter, when the config sets it. */
function isolationParameter(config: ModelConfig): JsIsolation | undefined {
  const value = config.parameters.isolation?.stringValue;
  if (value === undefined) return undefined;
  const word = value.trim().toLowerCase();
  if (word !== "thread" && word !== "shared") {
    throw new Error(`parameter 'isolation' of model '${config.name}' must be 'thread' or 'shared', got '${value}'`);
  }
  return word;
}

/** The model file: `default_model_filename`, else the first of {@link JS_MODEL_FILES} that exists. */
async function findModelFile(modelPath: string, version: number, config: ModelConfig): Promise<string | undefined> {
  const names = config.defaultModelFilename ? [config.defaultModelFilename] : JS_MODEL_FILES;
  for (const name of names) {
    const path = join(modelPath, String(version), name);
    if (
      await access(path).then(
        () => true,
        () => false,
      )
    ) {
      return path;
    }
  }
  return undefined;
}

/**
 * Call the class's static `autoCompleteConfig` where the model's instances will run: in a
 * throw-away worker, as Triton does in a throw-away interpreter, or on a shared thread (starting
 * a thread costs more than a slot on one, and Node keeps several MiB of each of the throw-away
 * threads that start together). Past `timeoutMs` (0: none) it fails; one whose shared thread a
 * neighbour ended is tried once more.
 */
async function runAutoComplete(
  file: string,
  config: ModelConfig,
  open: TransportFactory<ToWorker, FromWorker>,
  timeoutMs: number,
): Promise<ModelConfig | string> {
  let outcome = await autoCompleteOnce(file, config, open, timeoutMs);
  if (typeof outcome === "object" && "lostThread" in outcome) {
    outcome = await autoCompleteOnce(file, config, open, timeoutMs);
  }
  return typeof outcome === "object" && "lostThread" in outcome ? outcome.lostThread : outcome;
}

function autoCompleteOnce(
  file: string,
  config: ModelConfig,
  open: TransportFactory<ToWorker, FromWorker>,
  timeoutMs: number,
): Promise<ModelConfig | string | { lostThread: string }> {
  let transport: ReturnType<typeof open> | undefined;
  let timer: NodeJS.Timeout | undefined;
  return new Promise<ModelConfig | string | { lostThread: string }>((resolve) => {
    transport = open({
      message(message) {
        if (message.kind !== "auto-completed") return;
        if (message.error !== undefined) resolve(message.error);
        else {
          try {
            resolve(fromModelConfigJson(message.config as never));
          } catch (error) {
            resolve((error as Error).message);
          }
        }
      },
      ended: (reason, lostThread) => {
        const why = `the auto-complete worker ${reason}`;
        resolve(lostThread ? { lostThread: why } : why);
      },
    });
    if (timeoutMs > 0) timer = setTimeout(() => resolve(`the module did not load within ${timeoutMs} ms`), timeoutMs);
    transport.send({ kind: "auto-complete", file, config: toModelConfigJson(config) as Record<string, unknown> });
  }).finally(() => {
    clearTimeout(timer);
    void transport?.kill();
  });
}

/**
 * How many batches an instance takes at once: a decoupled model's `execute` returns before its
 * responses, so under the default scheduler its instance takes up to 4 (run in order in its
 * thread): a request does not wait in the server's queue for the last one's round trip to the
 * thread (4.0 ms a video for text_to_video with 8 users, in a trace). With dynamic batching it
 * takes one, so that batches form while an `execute` is out, as in Triton; default-mode models
 * take one.
 */
function instanceDepth(config: ModelConfig): number {
  const decoupled = config.modelTransactionPolicy?.decoupled ?? false;
  return decoupled && config.schedulingChoice.case === undefined ? 4 : 1;
}
