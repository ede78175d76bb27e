import type { ModelRateLimiter } from "@galley/proto";
import { now } from "../../base/clock.js";
import { backendError, ERRORS, InferenceError, modelError, toInferenceError } from "../../base/errors.js";
import { type InferenceRequest, priorityOf } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { Tensor } from "../../base/tensor.js";
import { workerEntry } from "../../base/worker-entry.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { checkOutputs, type OutputRules } from "../batch-io.js";
import type { HostToInstance, InstanceToHost } from "../host/host-messages.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import type { TransportFactory } from "../host/instance-transport.js";
import { workerTransport } from "../host/worker-transport.js";
import { BlsCalls, type InferencePath } from "../scripted/bls-calls.js";
import {
  type JsInit,
  type JsProtocol,
  type JsResult,
  tensorToWire,
  type WireError,
  type WireRequest,
  type WireResponse,
} from "./js-messages.js";
import { TENSOR_ERROR_IDS, type TensorErrorId, type TensorErrorTable } from "./js-tensors.js";

/** The scripted-model worker's entry. */
export const JS_WORKER_URL = workerEntry("./js-worker.js", import.meta.url);

/** How one instance runs: the module, `initialize`'s args and the isolation limits. */
export interface JsInstanceOptions {
  name: string;
  init: Omit<JsInit, "errors" | "memoryLimitBytes">;
  /** What the model's outputs must look like (its config). */
  outputRules: OutputRules;
  /**
   * Where the instance runs when it shares a thread (`isolation: "shared"`, see `SharedThreads`);
   * absent: a worker thread of its own.
   */
  thread?: TransportFactory<HostToInstance<JsProtocol>, InstanceToHost<JsProtocol>>;
  /** How many batches the instance takes at once (see `instanceDepth` in js-backend.ts); default 1. */
  depth?: number;
  /** `memory_limit_mb`: the worker's V8 heap limit, and the limit on heap plus ArrayBuffers, in MiB (a thread of its own only). */
  memoryLimitMb?: number;
  /** `execute_timeout_ms`: an execute that takes longer restarts the instance; 0 or absent: none. */
  executeTimeoutMs?: number;
  /** `initialize_timeout_ms`: a start whose `initialize` takes longer fails; 0 or absent: none. */
  initializeTimeoutMs?: number;
  /** Aborting it while the instance starts stops the worker and fails the start. */
  signal?: AbortSignal;
  rateLimiter?: ModelRateLimiter;
  inference: () => InferencePath;
  log: Logger;
}

const TENSOR_ERRORS = new Set<string>(TENSOR_ERROR_IDS);

/** The error table's entries the worker raises, sent with `start`. */
const ERROR_TABLE = Object.fromEntries(TENSOR_ERROR_IDS.map((id) => [id, ERRORS[id]])) as TensorErrorTable;

/** A model's error (a response's `error`, or a throw) with the Triton code it named, or the worker's own error. */
function wireError(error: WireError): InferenceError {
  if (error.id !== undefined && TENSOR_ERRORS.has(error.id)) {
    return new InferenceError(error.id as TensorErrorId, error.values ?? {});
  }
  return modelError(error.message, error.code);
}

const MiB = 1024 * 1024;

/**
 * One instance of a scripted model: a worker thread running the model module, supervised by an
 * instance host. Whatever kills the worker (an uncaught throw, an unhandled rejection,
 * `process.exit`, its memory limit, an execute past its timeout) fails only the requests this
 * instance holds (on a shared thread: those of every instance on the thread); the host restarts
 * it, backing off after repeated failures, and while it waits the instance is not
 * {@link JsInstance.healthy} and refuses requests at once.
 */
export class JsInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  /** Batches taken at once, run one after another in order in the worker (decoupled models only). */
  readonly depth: number;
  readonly #options: JsInstanceOptions;
  readonly #host: InstanceHost<JsProtocol>;
  readonly #bls: BlsCalls;
  readonly #probes = new Map<number, (ready: boolean) => void>();
  #nextProbe = 1;

  private constructor(options: JsInstanceOptions) {
    this.name = options.name;
    if (options.rateLimiter) this.rateLimiter = options.rateLimiter;
    this.depth = options.init.decoupled ? (options.depth ?? 1) : 1;
    this.#options = options;
    const limit = options.memoryLimitMb;
    this.#host = createInstanceHost<JsProtocol>({
      name: options.name,
      model: options.init.args.model_name ?? options.name,
      transport:
        options.thread ??
        workerTransport({
          entry: JS_WORKER_URL,
          name: `js:${options.name}`,
          ...(limit ? { memoryLimitMb: limit } : {}),
        }),
      init: { ...options.init, errors: ERROR_TABLE, ...(limit ? { memoryLimitBytes: limit * MiB } : {}) },
      ...(options.initializeTimeoutMs ? { startTimeoutMs: options.initializeTimeoutMs } : {}),
      ...(options.executeTimeoutMs ? { executeTimeoutMs: options.executeTimeoutMs } : {}),
      log: options.log,
      onMessage: (message) => this.#onMessage(message),
      onEnded: (key) => this.#bls.ended(key),
      onDown: () => {
        this.#bls.cancelAll();
        for (const resolve of this.#probes.values()) resolve(false);
        this.#probes.clear();
      },
    });
    this.#bls = new BlsCalls({
      inference: options.inference,
      reply: (message, transfer) => this.#host.post(message, transfer),
      signalOf: (key) => this.#host.request(key)?.signal,
      priorityOf: (key) => this.#host.request(key)?.priority,
      isOpen: (key) => this.#host.request(key) !== undefined,
      traceOf: (key) => this.#host.request(key)?.trace,
      tracing: "parents",
    });
  }

  /**
   * Start the worker and run `initialize`; rejects with the model's error, when `initialize`
   * outlasts `initializeTimeoutMs`, or when `signal` aborts (the worker is stopped in both cases).
   */
  static async start(options: JsInstanceOptions): Promise<JsInstance> {
    const instance = new JsInstance(options);
    await instance.#host.start(options.signal);
    return instance;
  }

  /** How many times the worker was replaced after a failure. */
  get restarts(): number {
    return this.#host.restarts;
  }

  /** False while the instance is down: restarting after a failure, or waiting to. */
  get healthy(): boolean {
    return this.#host.health === "up";
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    try {
      await this.#host.ready();
    } catch (error) {
      return failAll(requests, backendError(error), start);
    }
    const transfer = new Set<ArrayBuffer>();
    const keys: number[] = [];
    const wires: WireRequest[] = requests.map((request) => {
      const key = this.#host.open({
        signal: request.signal,
        trace: request.trace,
        priority: priorityOf(request),
        respond: (response, final) => this.#respond(key, request, response, final),
        fail: (error) => request.responder?.(error, true),
      });
      keys.push(key);
      const sequenceId = request.parameters.sequence_id;
      return {
        key,
        id: request.id,
        modelName: request.modelName,
        modelVersion: request.modelVersion,
        parameters: request.parameters,
        inputs: request.inputs.map((t) => tensorToWire(ownBuffer(t, transfer), transfer)),
        outputs: request.outputs.map((o) => o.name),
        correlationId: typeof sequenceId === "string" ? sequenceId : BigInt(sequenceId ?? 0),
        flags:
          (request.parameters.sequence_start === true ? 1 : 0) | (request.parameters.sequence_end === true ? 2 : 0),
        cancelled: request.signal?.aborted ?? false,
        ...(request.trace ? { traced: true, ...(request.trace.tensors ? { traceTensors: true } : {}) } : {}),
        ...(request.trace?.context !== undefined ? { traceContext: request.trace.context } : {}),
      };
    });
    let result: JsResult;
    try {
      result = await this.#host.execute(wires, [...transfer]);
    } catch (error) {
      const failure = backendError(error);
      // The host ended every request when the instance went away; not when the batch could not be sent.
      for (const [i, key] of keys.entries()) if (this.#host.end(key)) requests[i]?.responder?.(failure, true);
      return failAll(requests, failure, start);
    }
    return this.#executed(requests, keys, result, start);
  }

  /** The model's `isReady()` (true when it has none); false after 5 s without an answer, as Triton. */
  async isReady(): Promise<boolean> {
    if (this.#host.health !== "up") return false;
    const probe = this.#nextProbe++;
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        this.#probes.delete(probe);
        resolve(false);
      }, 5000);
      this.#probes.set(probe, (ready) => {
        clearTimeout(timer);
        resolve(ready);
      });
      this.#host.post({ kind: "is-ready", probe });
    });
  }

  /** Run `finalize` (for at most `graceMs`; not at all in a worker still initializing), then stop the worker. */
  close(graceMs = 5000): Promise<void> {
    return this.#host.close(graceMs);
  }

  #onMessage(message: JsProtocol["fromInstance"]): void {
    switch (message.kind) {
      case "bls":
        void this.#bls.run(message.call, message.request, message.stream, message.parents, message.ownSignal);
        return;
      case "bls-cancel":
        this.#bls.cancel(message.call);
        return;
      case "bls-drop":
        this.#bls.drop(message.refs);
        return;
      case "bls-direct":
        this.#bls.recordDirect(message.record);
        return;
      case "bls-route": {
        const route = this.#bls.directRoute(message.model, message.version);
        this.#host.post({
          kind: "bls-route",
          model: message.model,
          version: message.version,
          ...(route ? { route } : {}),
        });
        return;
      }
      case "ready":
        this.#probes.get(message.probe)?.(message.ready);
        this.#probes.delete(message.probe);
        return;
      case "memory-exceeded": {
        const used = Math.round(message.usedBytes / MiB);
        const limit = this.#options.memoryLimitMb;
        this.#host.fail(`ran out of memory (memory_limit_mb ${limit}: ${used} MiB of heap and ArrayBuffers in use)`);
        return;
      }
      case "log":
        if (message.level === "verbose") this.#options.log.verbose(1, `${this.name}: ${message.message}`);
        else this.#options.log[message.level](`${this.name}: ${message.message}`);
        return;
      default:
        return;
    }
  }

  #executed(requests: readonly InferenceRequest[], keys: number[], result: JsResult, start: bigint): ExecuteResult {
    const inferNs = now() - start;
    const decoupled = this.#options.init.decoupled;
    const { responses, error } = result;
    const outcome: (Tensor[] | Error)[] = requests.map((request, i) => {
      if (error) return wireError(error);
      if (decoupled) return [];
      const response = responses?.[i];
      if (!response) return new InferenceError("BACKEND_FAILED", { message: "the model returned no response" });
      return this.#outputs(request, response);
    });
    for (const [i, key] of keys.entries()) {
      // A decoupled request stays open until its final response; a failed execute ends it.
      const failure = outcome[i];
      if (!decoupled) this.#host.end(key);
      else if (failure instanceof Error && this.#host.end(key)) requests[i]?.responder?.(failure, true);
    }
    const parameters =
      !error && !decoupled && responses?.some((r) => Object.keys(r.parameters).length > 0)
        ? requests.map((_, i) => responses[i]?.parameters)
        : undefined;
    return {
      responses: outcome,
      ...(parameters ? { parameters } : {}),
      computeInputNs: 0n,
      computeInferNs: inferNs,
      computeOutputNs: 0n,
    };
  }

  /** One response of a request (the host has already forgotten a final one). */
  #respond(key: number, request: InferenceRequest, response: WireResponse | undefined, final: boolean): void {
    const responder = request.responder;
    if (!responder) return;
    const outputs = response && this.#outputs(request, response);
    if (outputs instanceof Error) {
      // The request ends with its first bad response; the model's later sends for it are dropped.
      if (!final) this.#host.end(key);
      responder(outputs, true);
    } else responder(outputs && response ? { outputs, parameters: response.parameters } : undefined, final);
  }

  /** A response's outputs, checked against the config, or why the request fails. */
  #outputs(request: InferenceRequest, response: WireResponse): Tensor[] | Error {
    if (response.notAResponse !== undefined) {
      return new InferenceError("MODEL_BAD_RESPONSE", { instance: this.name, type: response.notAResponse });
    }
    if (response.error) return wireError(response.error);
    let outputs: Tensor[];
    try {
      outputs = response.outputs.map((t) => this.#bls.output(t));
    } catch (error) {
      return toInferenceError(error);
    }
    const problem = checkOutputs(this.#options.outputRules, request, outputs);
    if (problem) for (const o of outputs) o.device?.release();
    return problem ?? outputs;
  }
}

/**
 * A tensor to move to the worker, or, when a tensor already moving with the batch shares its
 * buffer (one tensor mapped to two inputs, binary inputs read from one body), one to copy: each
 * input then owns its bytes in the worker, and the model may send each on by itself.
 */
function ownBuffer(tensor: Tensor, moving: ReadonlySet<ArrayBuffer>): Tensor {
  const buffer = tensor.data.buffer;
  return tensor.movable && buffer instanceof ArrayBuffer && moving.has(buffer) ? { ...tensor, movable: false } : tensor;
}

function failAll(requests: readonly InferenceRequest[], error: Error, start: bigint): ExecuteResult {
  return {
    responses: requests.map(() => error),
    computeInputNs: 0n,
    computeInferNs: now() - start,
    computeOutputNs: 0n,
  };
}
