import { Worker } from "node:worker_threads";
import type { ModelRateLimiter } from "@galley/proto";
import { InferenceError, type TritonCode, toInferenceError } from "../../core/errors.js";
import type { InferenceRequest, InferenceResponse, StreamedResponse } from "../../core/inference-request.js";
import type { Tensor } from "../../core/tensor.js";
import type { Logger } from "../../log.js";
import { now } from "../../scheduler/scheduler.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
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
  /** `memory_limit_mb`: the worker's V8 heap limit (old generation), in MiB. */
  memoryLimitMb?: number;
  /** `execute_timeout_ms`: an execute that takes longer restarts the instance. */
  executeTimeoutMs?: number;
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
 * restarts with a fresh worker and the server never notices.
 */
export class JsInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #options: JsInstanceOptions;
  #worker: Worker | undefined;
  #ready!: Promise<void>;
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

  /** Start the worker and run `initialize`; rejects with the model's error. */
  static async start(options: JsInstanceOptions): Promise<JsInstance> {
    const instance = new JsInstance(options);
    instance.#spawn();
    try {
      await instance.#ready;
    } catch (error) {
      await instance.close();
      throw error;
    }
    return instance;
  }

  /** How many times the worker was replaced after a failure. */
  get restarts(): number {
    return this.#restarts;
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    try {
      await this.#ready;
    } catch (error) {
      // The last restart failed: try again now rather than fail forever.
      this.#spawn();
      try {
        await this.#ready;
      } catch {
        return failAll(requests, toInferenceError(error), start);
      }
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
      const timeout = this.#options.executeTimeoutMs;
      if (timeout) {
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
    try {
      await this.#ready;
    } catch {
      return false;
    }
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

  /** Run `finalize` (for at most `graceMs`), then stop the worker. */
  async close(graceMs = 5000): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    const worker = this.#worker;
    if (!worker) {
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
    let settle: { resolve(): void; reject(error: Error): void } | undefined;
    this.#ready = new Promise<void>((resolve, reject) => {
      settle = { resolve, reject };
    });
    // Nobody may be waiting yet; a failed start is reported to the next caller.
    this.#ready.catch(() => undefined);
    worker.on("message", (message: FromWorker) => {
      if (message.kind === "initialized") settle?.resolve();
      else if (message.kind === "init-failed") {
        settle?.reject(new Error(message.message));
        // Not a crash: the next execute (or nobody) starts the worker again.
        if (this.#worker === worker) this.#worker = undefined;
        void worker.terminate();
      } else this.#onMessage(message);
    });
    worker.on("error", (error) => this.#onDeath(worker, describeCrash(error, limit), settle));
    // A reply that cannot be read would leave its request waiting forever: treat it as a crash.
    worker.on("messageerror", (error) =>
      this.#onDeath(worker, `sent a message the server could not read (${error.message})`, settle),
    );
    worker.on("exit", (code) => this.#onDeath(worker, `exited with code ${code}`, settle));
    worker.postMessage(this.#options.init satisfies ToWorker);
  }

  /** The worker died: fail what it held and, unless closing, start a fresh one. */
  #onDeath(worker: Worker, what: string, settle?: { reject(error: Error): void }): void {
    if (worker !== this.#worker) return;
    const reason = this.#killReason ?? what;
    this.#killReason = undefined;
    settle?.reject(new Error(`model instance '${this.name}' ${reason}`));
    if (this.#closing) return;
    // Mark this worker as gone so its 'exit' after an 'error' is not counted twice.
    this.#worker = undefined;
    this.#options.log.error(`model instance '${this.name}' ${reason}; restarting it`);
    this.#failAll(
      new InferenceError("BACKEND_FAILED", {
        message: `model instance '${this.name}' ${reason}; the instance is restarting`,
      }),
    );
    void worker.terminate();
    this.#restarts++;
    this.#spawn();
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
    const outcome: (Tensor[] | Error)[] = batch.requests.map((_, i) => {
      if (error) return modelError(error);
      if (decoupled) return [];
      const response = responses?.[i];
      if (!response) return new InferenceError("BACKEND_FAILED", { message: "the model returned no response" });
      if (response.error) return modelError(response.error);
      return response.outputs.map(fromWire);
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
    if (response?.error) responder(modelError(response.error), true);
    else
      responder(
        response ? { outputs: response.outputs.map(fromWire), parameters: response.parameters } : undefined,
        final,
      );
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
