import { Worker } from "node:worker_threads";
import type { ModelRateLimiter } from "@galley/proto";
import { InferenceError, type TritonCode, toInferenceError } from "../../core/errors.js";
import type { InferenceRequest, InferenceResponse, StreamedResponse } from "../../core/inference-request.js";
import type { Tensor } from "../../core/tensor.js";
import type { Logger } from "../../log.js";
import { now } from "../../scheduler/scheduler.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { checkOutputs, type OutputRules } from "../check-outputs.js";
import type {
  FromWorker,
  InitMessage,
  ToWorker,
  WireBlsResponse,
  WireError,
  WireRequest,
  WireResponse,
  WireTensor,
} from "./js-messages.js";

/** The worker entry, built into dist/ (see the ONNX Runtime backend for why it is resolved so). */
export const JS_WORKER_URL = new URL("../../../dist/backend/js/js-worker.js", import.meta.url);

/** The server's inference path, for BLS calls. */
export interface InferencePath {
  infer(request: InferenceRequest): Promise<InferenceResponse>;
  stream(request: InferenceRequest): AsyncIterable<StreamedResponse>;
}

/** How one instance runs: the module, `initialize`'s args and the isolation limits. */
export interface JsInstanceOptions {
  name: string;
  init: InitMessage;
  /** What the model's outputs must look like (its config). */
  outputRules: OutputRules;
  /** `memory_limit_mb`: the worker's V8 heap limit, and the limit on heap plus ArrayBuffers, in MiB. */
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

interface Batch {
  requests: readonly InferenceRequest[];
  keys: number[];
  start: bigint;
  timer?: NodeJS.Timeout;
  resolve(result: ExecuteResult): void;
}

const CODES = new Set<string>([
  "UNKNOWN",
  "INTERNAL",
  "NOT_FOUND",
  "INVALID_ARG",
  "UNAVAILABLE",
  "UNSUPPORTED",
  "ALREADY_EXISTS",
  "CANCELLED",
]);

/** A model's error (a response's `error`, or a throw) with the Triton code it named. */
function modelError(error: WireError): InferenceError {
  const code = error.code !== undefined && CODES.has(error.code) ? (error.code as TritonCode) : undefined;
  return new InferenceError("BACKEND_FAILED", { message: error.message }, code ? { code } : {});
}

/** The first restart after a failure is immediate; each further one waits twice as long, up to the cap. */
export const RESTART_BACKOFF_FIRST_MS = 100;
export const RESTART_BACKOFF_MAX_MS = 30_000;
/** A worker that stayed up this long resets the back-off: its next failure restarts it at once. */
export const RESTART_BACKOFF_RESET_MS = 10_000;

const MiB = 1024 * 1024;

function fromWire(wire: WireTensor): Tensor {
  return {
    name: wire.name,
    datatype: wire.datatype as Tensor["datatype"],
    shape: wire.shape,
    data: wire.data,
    parameters: {},
    movable: true,
  };
}

/**
 * A tensor for a worker and the buffer to move with it: a movable tensor's buffer moves (no copy);
 * any other tensor is copied once, just its bytes (cloning a view would clone its whole buffer;
 * `new Uint8Array(view)` copies, where a Node Buffer's `slice` would return a view).
 */
function toWorker(tensor: Tensor, transfer: Set<ArrayBuffer>): WireTensor {
  let data = tensor.data;
  if (tensor.movable && data.buffer instanceof ArrayBuffer) transfer.add(data.buffer);
  else {
    data = new Uint8Array(data);
    transfer.add(data.buffer as ArrayBuffer);
  }
  return { name: tensor.name, datatype: tensor.datatype, shape: tensor.shape, data };
}

/**
 * One instance of a scripted model: a worker thread running the model module. Whatever kills
 * the worker (an uncaught throw, an unhandled rejection, `process.exit`, its memory limit, an
 * execute past its timeout) fails only the requests this instance holds; the instance then
 * restarts with a fresh worker. Repeated failures back off (see {@link RESTART_BACKOFF_FIRST_MS});
 * while it waits, the instance is not {@link JsInstance.healthy} and refuses requests at once.
 */
export class JsInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #options: JsInstanceOptions;
  #worker: Worker | undefined;
  /** Settles when the current worker has run `initialize`; rejects when it fails to. */
  #ready!: Promise<void>;
  /** `starting`: a worker runs `initialize`; `up`: it serves; `waiting`: the back-off before the next start. */
  #state: "starting" | "up" | "waiting" | "closed" = "starting";
  /** Whether a worker ever finished `initialize`: failures before that fail the load instead of restarting. */
  #started = false;
  #upSince = 0;
  /** Failures since the instance last stayed up for {@link RESTART_BACKOFF_RESET_MS}. */
  #failures = 0;
  #retry: { timer: NodeJS.Timeout; at: number; reason: string } | undefined;
  #initTimer: NodeJS.Timeout | undefined;
  #nextBatch = 1;
  #nextKey = 1;
  readonly #batches = new Map<number, Batch>();
  /** Requests the worker may still answer or send to, by key. */
  readonly #open = new Map<number, { request: InferenceRequest; onAbort?: () => void }>();
  /** BLS calls in flight, by the worker's call number. */
  readonly #calls = new Map<number, AbortController>();
  #probes = new Map<number, (ready: boolean) => void>();
  #nextProbe = 1;
  #closing = false;
  /** Why the current worker is being replaced (a timeout), to word the failure. */
  #killReason: string | undefined;
  #restarts = 0;

  private constructor(options: JsInstanceOptions) {
    this.name = options.name;
    if (options.rateLimiter) this.rateLimiter = options.rateLimiter;
    this.#options = options;
  }

  /**
   * Start the worker and run `initialize`; rejects with the model's error, when `initialize`
   * outlasts `initializeTimeoutMs`, or when `signal` aborts (the worker is stopped in both cases).
   */
  static async start(options: JsInstanceOptions): Promise<JsInstance> {
    const instance = new JsInstance(options);
    const { signal } = options;
    const onAbort = () => instance.#kill("was unloaded while it was initializing");
    instance.#spawn();
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await instance.#ready;
    } catch (error) {
      await instance.close(0);
      throw error;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    return instance;
  }

  /** How many times the worker was replaced after a failure. */
  get restarts(): number {
    return this.#restarts;
  }

  /** False while the instance is down: restarting after a failure, or waiting to. */
  get healthy(): boolean {
    return this.#state === "up";
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    // A worker that failed while this waited is replaced by another, which is waited for in turn.
    while (this.#state === "starting") {
      try {
        await this.#ready;
      } catch (error) {
        return failAll(requests, toInferenceError(error), start);
      }
    }
    if (this.#retry) return failAll(requests, this.#unavailable(this.#retry), start);
    if (this.#state !== "up") {
      const unloaded = new InferenceError("BACKEND_FAILED", { message: `model instance '${this.name}' was unloaded` });
      return failAll(requests, unloaded, start);
    }
    const transfer = new Set<ArrayBuffer>();
    const keys: number[] = [];
    const wires: WireRequest[] = requests.map((request) => {
      const key = this.#nextKey++;
      keys.push(key);
      const entry: { request: InferenceRequest; onAbort?: () => void } = { request };
      if (request.signal) {
        entry.onAbort = () => this.#post({ kind: "cancel", key });
        request.signal.addEventListener("abort", entry.onAbort, { once: true });
      }
      this.#open.set(key, entry);
      const sequenceId = request.parameters.sequence_id;
      return {
        key,
        id: request.id,
        modelName: request.modelName,
        modelVersion: request.modelVersion,
        parameters: request.parameters,
        inputs: request.inputs.map((t) => toWorker(t, transfer)),
        outputs: request.outputs.map((o) => o.name),
        correlationId: typeof sequenceId === "string" ? sequenceId : BigInt(sequenceId ?? 0),
        flags:
          (request.parameters.sequence_start === true ? 1 : 0) | (request.parameters.sequence_end === true ? 2 : 0),
        cancelled: request.signal?.aborted ?? false,
      };
    });
    const batch = this.#nextBatch++;
    return new Promise<ExecuteResult>((resolve) => {
      const entry: Batch = { requests, keys, start, resolve };
      const timeout = this.#options.executeTimeoutMs ?? 0;
      if (timeout > 0) {
        entry.timer = setTimeout(() => {
          this.#kill(`did not finish execute within ${timeout} ms (execute_timeout_ms)`);
        }, timeout);
      }
      this.#batches.set(batch, entry);
      this.#post({ kind: "execute", batch, requests: wires }, transfer);
    });
  }

  /** The model's `isReady()` (true when it has none); false after 5 s without an answer, as Triton. */
  async isReady(): Promise<boolean> {
    if (this.#state !== "up") return false;
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
      this.#post({ kind: "is-ready", probe });
    });
  }

  /** Run `finalize` (for at most `graceMs`; not at all in a worker still initializing), then stop the worker. */
  async close(graceMs = 5000): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    const up = this.#state === "up";
    this.#state = "closed";
    clearTimeout(this.#retry?.timer);
    this.#retry = undefined;
    clearTimeout(this.#initTimer);
    const worker = this.#worker;
    // What a request still waiting for this worker's start is told.
    this.#killReason = "was unloaded";
    if (!worker || graceMs <= 0 || !up) {
      if (worker) await worker.terminate();
      this.#failAll(new InferenceError("BACKEND_FAILED", { message: `model instance '${this.name}' was unloaded` }));
      return;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, graceMs);
      const onMessage = (message: FromWorker) => {
        if (message.kind !== "finalized") return;
        clearTimeout(timer);
        resolve();
      };
      worker.on("message", onMessage);
      worker.once("exit", () => {
        clearTimeout(timer);
        resolve();
      });
      try {
        worker.postMessage({ kind: "finalize" } satisfies ToWorker);
      } catch {
        resolve();
      }
    });
    this.#failAll(new InferenceError("BACKEND_FAILED", { message: `model instance '${this.name}' was unloaded` }));
    await worker.terminate();
  }

  #spawn(): void {
    const limit = this.#options.memoryLimitMb;
    const worker = new Worker(JS_WORKER_URL, {
      name: `js:${this.name}`,
      ...(limit
        ? { resourceLimits: { maxOldGenerationSizeMb: limit, maxYoungGenerationSizeMb: Math.max(4, limit / 8) } }
        : {}),
    });
    this.#worker = worker;
    this.#killReason = undefined;
    this.#state = "starting";
    this.#upSince = 0;
    let settle: { resolve(): void; reject(error: Error): void } | undefined;
    this.#ready = new Promise<void>((resolve, reject) => {
      settle = { resolve, reject };
    });
    // Nobody may be waiting yet; a failed start is reported to the next caller.
    this.#ready.catch(() => undefined);
    const initTimeout = this.#options.initializeTimeoutMs ?? 0;
    if (initTimeout > 0) {
      this.#initTimer = setTimeout(
        () => this.#kill(`did not finish initialize within ${initTimeout} ms (initialize_timeout_ms)`),
        initTimeout,
      );
    }
    worker.on("message", (message: FromWorker) => {
      if (worker !== this.#worker) return;
      if (message.kind === "initialized") {
        clearTimeout(this.#initTimer);
        this.#state = "up";
        this.#started = true;
        this.#upSince = performance.now();
        settle?.resolve();
      } else if (message.kind === "init-failed") {
        // A failed load reports the model's own message.
        if (!this.#started) settle?.reject(new Error(message.message));
        this.#onDeath(worker, `failed to initialize: ${message.message}`, settle);
      } else if (message.kind === "memory-exceeded") {
        const used = Math.round(message.usedBytes / MiB);
        this.#kill(`ran out of memory (memory_limit_mb ${limit}: ${used} MiB of heap and ArrayBuffers in use)`);
      } else this.#onMessage(message);
    });
    worker.on("error", (error) => this.#onDeath(worker, describeCrash(error, limit), settle));
    // A reply that cannot be read would leave its request waiting forever: treat it as a crash.
    worker.on("messageerror", (error) =>
      this.#onDeath(worker, `sent a message the server could not read (${error.message})`, settle),
    );
    worker.on("exit", (code) => this.#onDeath(worker, `exited with code ${code}`, settle));
    worker.postMessage({
      ...this.#options.init,
      ...(limit ? { memoryLimitBytes: limit * MiB } : {}),
    } satisfies ToWorker);
  }

  /**
   * The worker died or failed to initialize: fail what it held and, unless closing or still
   * loading, start a fresh one, at once after a first failure and later after repeated ones.
   */
  #onDeath(worker: Worker, what: string, settle?: { reject(error: Error): void }): void {
    if (worker !== this.#worker) return;
    // Mark this worker as gone so its 'exit' after an 'error' is not counted twice.
    this.#worker = undefined;
    clearTimeout(this.#initTimer);
    void worker.terminate();
    const reason = this.#killReason ?? what;
    this.#killReason = undefined;
    if (this.#closing || !this.#started) {
      settle?.reject(new Error(`model instance '${this.name}' ${reason}`));
      return;
    }
    if (this.#upSince > 0 && performance.now() - this.#upSince >= RESTART_BACKOFF_RESET_MS) this.#failures = 0;
    const delay =
      this.#failures === 0 ? 0 : Math.min(RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_FIRST_MS * 2 ** (this.#failures - 1));
    this.#failures++;
    this.#restarts++;
    this.#options.log.error(
      `model instance '${this.name}' ${reason}; restarting it${delay > 0 ? ` in ${delay} ms` : ""}`,
    );
    const failure = new InferenceError("BACKEND_FAILED", {
      message: `model instance '${this.name}' ${reason}; the instance is restarting`,
    });
    this.#failAll(failure);
    if (delay === 0) {
      settle?.reject(failure);
      this.#spawn();
      return;
    }
    this.#state = "waiting";
    const retry = {
      timer: setTimeout(() => {
        this.#retry = undefined;
        this.#spawn();
      }, delay),
      at: performance.now() + delay,
      reason,
    };
    // A pending restart alone does not keep the process alive.
    retry.timer.unref();
    this.#retry = retry;
    settle?.reject(this.#unavailable(retry));
  }

  /** Why a request to this instance fails at once while it waits to restart. */
  #unavailable(retry: { at: number; reason: string }): InferenceError {
    return new InferenceError("MODEL_INSTANCE_RESTARTING", {
      model: this.#options.init.args.model_name ?? this.name,
      instance: this.name,
      reason: retry.reason,
      ms: Math.max(0, Math.ceil(retry.at - performance.now())),
    });
  }

  #kill(reason: string): void {
    this.#killReason = reason;
    void this.#worker?.terminate();
  }

  #post(message: ToWorker, transfer: Set<ArrayBuffer> = new Set()): void {
    try {
      this.#worker?.postMessage(message, [...transfer]);
    } catch {
      this.#worker?.postMessage(message);
    }
  }

  #onMessage(message: FromWorker): void {
    switch (message.kind) {
      case "executed":
        this.#executed(message.batch, message.responses, message.error);
        return;
      case "send":
        this.#send(message.key, message.response, message.final);
        return;
      case "bls":
        void this.#bls(message.call, message.request, message.stream, message.parents);
        return;
      case "bls-cancel":
        this.#calls.get(message.call)?.abort();
        return;
      case "ready":
        this.#probes.get(message.probe)?.(message.ready);
        this.#probes.delete(message.probe);
        return;
      case "log":
        if (message.level === "verbose") this.#options.log.verbose(1, `${this.name}: ${message.message}`);
        else this.#options.log[message.level](`${this.name}: ${message.message}`);
        return;
      default:
        return;
    }
  }

  #executed(batchId: number, responses: WireResponse[] | undefined, error: WireError | undefined): void {
    const batch = this.#batches.get(batchId);
    if (!batch) return;
    this.#batches.delete(batchId);
    clearTimeout(batch.timer);
    const inferNs = now() - batch.start;
    const decoupled = this.#options.init.decoupled;
    const outcome: (Tensor[] | Error)[] = batch.requests.map((request, i) => {
      if (error) return modelError(error);
      if (decoupled) return [];
      const response = responses?.[i];
      if (!response) return new InferenceError("BACKEND_FAILED", { message: "the model returned no response" });
      return this.#outputs(request, response);
    });
    for (const [i, key] of batch.keys.entries()) {
      // A decoupled request stays open until its final response; a failed execute ends it.
      const failure = outcome[i];
      if (!decoupled) this.#close(key);
      else if (failure instanceof Error) {
        this.#open.get(key)?.request.responder?.(failure, true);
        this.#close(key);
      }
    }
    batch.resolve({ responses: outcome, computeInputNs: 0n, computeInferNs: inferNs, computeOutputNs: 0n });
  }

  #send(key: number, response: WireResponse | undefined, final: boolean): void {
    const entry = this.#open.get(key);
    if (!entry) return;
    const responder = entry.request.responder;
    if (final) this.#close(key);
    if (!responder) return;
    const outputs = response && this.#outputs(entry.request, response);
    if (outputs instanceof Error) {
      // The request ends with its first bad response; the model's later sends for it are dropped.
      if (!final) this.#close(key);
      responder(outputs, true);
    } else responder(outputs && response ? { outputs, parameters: response.parameters } : undefined, final);
  }

  /** A response's outputs, checked against the config, or why the request fails. */
  #outputs(request: InferenceRequest, response: WireResponse): Tensor[] | Error {
    if (response.notAResponse !== undefined) {
      return new InferenceError("MODEL_BAD_RESPONSE", { instance: this.name, type: response.notAResponse });
    }
    if (response.error) return modelError(response.error);
    const outputs = response.outputs.map(fromWire);
    return checkOutputs(this.#options.outputRules, request, outputs) ?? outputs;
  }

  #close(key: number): void {
    const entry = this.#open.get(key);
    if (!entry) return;
    this.#open.delete(key);
    if (entry.onAbort) entry.request.signal?.removeEventListener("abort", entry.onAbort);
  }

  /** A BLS call from the model: the server's own inference path, answered message by message. */
  async #bls(
    call: number,
    wire: import("./js-messages.js").WireBlsRequest,
    stream: boolean,
    parents: number[],
  ): Promise<void> {
    const controller = new AbortController();
    this.#calls.set(call, controller);
    // With no signal of its own, a call is cancelled once every request of its batch is.
    const parentSignals = parents.flatMap((key) => this.#open.get(key)?.request.signal ?? []);
    if (parents.length > 0 && parentSignals.length === parents.length) {
      const onAbort = () => {
        if (parentSignals.every((s) => s.aborted)) controller.abort();
      };
      for (const signal of parentSignals) signal.addEventListener("abort", onAbort, { once: true });
      onAbort();
    }
    const request: InferenceRequest = {
      modelName: wire.model,
      modelVersion: wire.version,
      id: wire.id,
      parameters: wire.parameters,
      inputs: wire.inputs.map(fromWire),
      outputs: wire.outputs.map((name) => ({ name, parameters: {} })),
      signal: controller.signal,
    };
    const reply = (response: InferenceResponse | undefined, final: boolean, error?: unknown) => {
      const transfer = new Set<ArrayBuffer>();
      const out: WireBlsResponse | undefined = response && {
        modelName: response.modelName,
        modelVersion: response.modelVersion,
        id: response.id,
        parameters: response.parameters,
        outputs: response.outputs.map((t) => toWorker(t, transfer)),
      };
      const failure = error === undefined ? undefined : toInferenceError(error);
      this.#post(
        {
          kind: "bls-reply",
          call,
          ...(out ? { response: out } : {}),
          ...(failure ? { error: { message: failure.message, code: failure.code } } : {}),
          final,
        },
        transfer,
      );
    };
    try {
      const path = this.#options.inference();
      if (!stream) reply(await path.infer(request), true);
      else {
        let ended = false;
        for await (const item of path.stream(request)) {
          if (controller.signal.aborted) break;
          reply(item.empty ? undefined : item.response, item.final);
          ended = item.final;
        }
        if (!ended) reply(undefined, true);
      }
    } catch (error) {
      reply(undefined, true, error);
    } finally {
      this.#calls.delete(call);
    }
  }

  #failAll(error: InferenceError): void {
    for (const [id, batch] of this.#batches) {
      clearTimeout(batch.timer);
      this.#batches.delete(id);
      batch.resolve(failAll(batch.requests, error, batch.start));
    }
    for (const [key, entry] of this.#open) {
      entry.request.responder?.(error, true);
      this.#close(key);
    }
    for (const controller of this.#calls.values()) controller.abort();
    this.#calls.clear();
    for (const resolve of this.#probes.values()) resolve(false);
    this.#probes.clear();
  }
}

function failAll(requests: readonly InferenceRequest[], error: Error, start: bigint): ExecuteResult {
  return {
    responses: requests.map(() => error),
    computeInputNs: 0n,
    computeInferNs: now() - start,
    computeOutputNs: 0n,
  };
}

function describeCrash(error: Error, limitMb: number | undefined): string {
  if ((error as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY") {
    return `ran out of memory${limitMb ? ` (memory_limit_mb ${limitMb})` : ""}`;
  }
  return `crashed: ${error.message}`;
}
