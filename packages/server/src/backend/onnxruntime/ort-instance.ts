import { statSync } from "node:fs";
import type { ModelConfig, ModelOutput, ModelRateLimiter } from "@galley/proto";
import { now } from "../../base/clock.js";
import { InferenceError } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { Tensor } from "../../base/tensor.js";
import { workerEntry } from "../../base/worker-entry.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { checkOutputs, gatherInput, type OutputRules, outputRules, scatterOutput } from "../batch-io.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import { workerTransport } from "../host/worker-transport.js";
import { type InlineSession, inlineSessionsAvailable, openInlineSession, RunCost, WINDOW } from "./inline-session.js";
import type { OrtProtocol, OrtSessionSettings, SessionIO, WireTensor } from "./ort-messages.js";
import { keepOrtTelemetryOff } from "./ort-telemetry.js";
import { fromOrtTensor, toOrtTensor, warmupFeeds } from "./ort-tensors.js";

/**
 * Default for `inline_max_run_us`: a batch runs on the event loop only when its expected run is
 * at most this long (the server's rule: nothing longer than about 100 µs on the loop).
 */
export const DEFAULT_INLINE_MAX_RUN_US = 100;

/**
 * Model files larger than this are never loaded on the event loop: loading takes longer, and a
 * model whose weights alone are this large cannot run within the budget (reading them takes longer).
 */
export const INLINE_MAX_FILE_BYTES = 4 * 1024 * 1024;

/**
 * Default for `worker_hot_wait_us`: after a batch of one request, the instance's worker thread
 * waits this long hot for the next batch (see `HotWait`) before it sleeps. A lone client's calls
 * follow each other within it on a 2-vCPU VM (~0.5 ms from one answer to the next call); the
 * thread then takes the next batch without a wake-up (~50 µs of each call there).
 */
export const DEFAULT_WORKER_HOT_WAIT_US = 1000;

/** Warm-up runs of a session loaded on the event loop. */
const WARMUP_RUNS = 24;

/** The ONNX Runtime worker's entry. */
export const ORT_WORKER_URL = workerEntry("./ort-worker.js", import.meta.url);

/** Where and how one session runs. */
export interface OrtHostOptions {
  /** The instance's name (`<group>_<n>`). */
  name: string;
  /** The model's name. */
  model: string;
  /** The model file. */
  path: string;
  settings: OrtSessionSettings;
  log: Logger;
}

/**
 * A host for one ONNX Runtime session in its own worker thread (not started): if the worker
 * dies, what it held fails, and a fresh worker loads the model again (see `InstanceHost`).
 */
export function createOrtHost(options: OrtHostOptions): InstanceHost<OrtProtocol> {
  // The worker's native code reads this thread's environment, not the worker's copy of it.
  keepOrtTelemetryOff();
  return createInstanceHost<OrtProtocol>({
    name: options.name,
    model: options.model,
    transport: workerTransport({ entry: ORT_WORKER_URL, name: `ort:${options.name}` }),
    init: { path: options.path, settings: options.settings },
    log: options.log,
  });
}

/** Options for {@link OrtInstance.start}. */
export interface OrtInstanceOptions extends Omit<OrtHostOptions, "model"> {
  config: ModelConfig;
  rateLimiter?: ModelRateLimiter | undefined;
  /** Aborting it while the session loads stops the worker and fails the start. */
  signal?: AbortSignal | undefined;
  /**
   * `inline_max_run_us`: run a batch on the event loop when its expected run time is at most this
   * many µs (default {@link DEFAULT_INLINE_MAX_RUN_US}); 0 runs every batch in a worker thread.
   */
  inlineMaxRunUs?: number | undefined;
  /**
   * `worker_hot_wait_us`: after a batch of one request, how long the worker thread waits hot for
   * the next (default {@link DEFAULT_WORKER_HOT_WAIT_US}); 0 never.
   */
  workerHotWaitUs?: number | undefined;
}

/**
 * One instance: gathers the batch, runs it, and splits the outputs per request. Where a batch
 * runs is decided per batch: on the event loop, in a session loaded in the server's own isolate,
 * when its expected run time (from the instance's own runs of that size, see `RunCost`) is within
 * `inline_max_run_us`; otherwise in a worker thread holding its own session, started the first
 * time it is needed. A small model thus costs no thread hop and no isolate; a model whose runs
 * are long never blocks the loop. Models whose file exceeds {@link INLINE_MAX_FILE_BYTES}, or
 * whose warm-up runs exceed the budget, run only in their worker.
 */
export class OrtInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #options: OrtInstanceOptions;
  #inline: InlineSession | undefined;
  #host: InstanceHost<OrtProtocol> | undefined;
  #hostStarting: Promise<InstanceHost<OrtProtocol>> | undefined;
  readonly #cost = new RunCost();
  readonly #budgetNs: number;
  readonly #hotWaitUs: number;
  #caught = 0;
  readonly #config: ModelConfig;
  readonly #batching: boolean;
  readonly #outputs: Map<string, ModelOutput>;
  /** The config's input and output names, in config order. */
  readonly #configInputNames: readonly string[];
  readonly #outputNames: readonly string[];
  readonly #inputs: Map<string, ModelConfig["input"][number]>;
  readonly #rules: OutputRules;
  #closed = false;

  private constructor(options: OrtInstanceOptions) {
    this.name = options.name;
    if (options.rateLimiter) this.rateLimiter = options.rateLimiter;
    this.#options = options;
    this.#config = options.config;
    this.#budgetNs = (options.inlineMaxRunUs ?? DEFAULT_INLINE_MAX_RUN_US) * 1000;
    this.#hotWaitUs = options.workerHotWaitUs ?? DEFAULT_WORKER_HOT_WAIT_US;
    this.#batching = options.config.maxBatchSize > 0;
    this.#outputs = new Map(options.config.output.map((o) => [o.name, o]));
    this.#inputs = new Map(options.config.input.map((i) => [i.name, i]));
    this.#configInputNames = options.config.input.map((i) => i.name);
    this.#outputNames = options.config.output.map((o) => o.name);
    this.#rules = outputRules(options.config);
  }

  /**
   * Load the model: on the event loop when it may run there (then warmed up and measured),
   * otherwise in a worker thread. Rejects with onnxruntime's message when it does not load.
   */
  static async start(options: OrtInstanceOptions): Promise<OrtInstance> {
    const instance = new OrtInstance(options);
    await instance.#start();
    return instance;
  }

  async #start(): Promise<void> {
    const { path, settings, signal } = this.#options;
    if (this.#budgetNs > 0 && inlineSessionsAvailable() && fileSize(path) <= INLINE_MAX_FILE_BYTES) {
      try {
        this.#inline = openInlineSession(path, settings);
      } catch {
        // The worker loads it again and reports onnxruntime's own message.
      }
      if (this.#inline && !this.#warmUp(this.#inline)) {
        this.#inline.release();
        this.#inline = undefined;
      }
    }
    if (signal?.aborted) {
      this.#inline?.release();
      this.#inline = undefined;
      throw new Error(`model instance '${this.name}' was unloaded while it was initializing`);
    }
    if (!this.#inline) await this.#worker();
  }

  /**
   * A few runs of zeros (every variable dimension 1) to measure the session: false when they take
   * longer than the budget. A model that cannot run on zeros is measured by its first real runs,
   * made in the worker.
   */
  #warmUp(session: InlineSession): boolean {
    let feeds: WireTensor[];
    try {
      feeds = warmupFeeds(session.io.inputs);
    } catch {
      return true;
    }
    const fetches = session.io.outputs.map((o) => o.name);
    const elements = countElements(feeds);
    // The first runs are slow (cold code and memory: tens of ms for the very first on `simple`,
    // which then runs in about 20 µs), so only the last runs of the warm-up count. It stops early
    // when even the fastest run after the first is ten times over the budget: such a model does
    // not belong on the event loop, and the warm-up would only hold the loop longer.
    let fastest = Number.POSITIVE_INFINITY;
    for (let i = 0; i < WARMUP_RUNS; i++) {
      const start = now();
      try {
        session.run(feeds, fetches, true);
      } catch {
        return true;
      }
      const ns = Number(now() - start);
      if (i >= WARMUP_RUNS - WINDOW) this.#cost.observe(elements, ns);
      if (i > 0) fastest = Math.min(fastest, ns);
      if (i >= 3 && fastest > 10 * this.#budgetNs) return false;
    }
    return (this.#cost.estimate(elements) ?? 0) <= this.#budgetNs;
  }

  /** The worker-thread host, started on first use. */
  #worker(): Promise<InstanceHost<OrtProtocol>> {
    if (this.#host) return Promise.resolve(this.#host);
    this.#hostStarting ??= (async () => {
      const host = createOrtHost({ ...this.#options, model: this.#config.name });
      await host.start(this.#options.signal);
      if (this.#closed) {
        await host.close();
        throw new InferenceError("BACKEND_FAILED", { message: `model instance '${this.name}' was unloaded` });
      }
      this.#host = host;
      return host;
    })();
    this.#hostStarting.catch(() => {
      this.#hostStarting = undefined;
    });
    return this.#hostStarting;
  }

  /** The model's inputs and outputs, as the session reports them. */
  get io(): SessionIO {
    return this.#inline?.io ?? this.#host?.info ?? { inputs: [], outputs: [] };
  }

  /** Where the next small batch runs: `inline` (event loop) or `worker`. */
  get placement(): "inline" | "worker" {
    return this.#inline ? "inline" : "worker";
  }

  /** Whether this instance has a worker thread (started the first time a batch needed one). */
  get hasWorker(): boolean {
    return this.#host !== undefined;
  }

  /** Batches the worker took while it waited hot for them (`worker_hot_wait_us`). */
  get hotBatches(): number {
    return this.#caught;
  }

  /** False while the session's worker is down: restarting after a failure, or waiting to. */
  get healthy(): boolean {
    return !this.#host || this.#host.health === "up";
  }

  /** Whether a batch of `elements` input elements runs on the event loop. */
  #runsInline(elements: number): boolean {
    if (!this.#inline) return false;
    const estimate = this.#cost.estimate(elements);
    if (estimate === undefined) return false;
    // A size not seen yet is extrapolated pessimistically: try it here once if that stays within
    // twice the budget, so that the estimate is learnt without starting a worker for it.
    return estimate <= (this.#cost.seen(elements) ? this.#budgetNs : 2 * this.#budgetNs);
  }

  /** Say why a model that ran on the event loop starts its worker thread. */
  #logMove(elements: number): void {
    const estimate = this.#cost.estimate(elements);
    const expected = estimate === undefined ? "not measured yet" : `expected to take ${Math.round(estimate / 1000)} µs`;
    this.#options.log.info(
      `model instance '${this.name}': a batch of ${elements} input elements is ${expected}, over inline_max_run_us ` +
        `(${this.#budgetNs / 1000}); starting its worker thread`,
    );
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    const batchSizes = requests.map((r) => (this.#batching ? (r.inputs[0]?.shape[0] ?? 1) : 1));
    const tensors: { tensor: Tensor; dims: number[] }[] = [];
    let elements = 0;
    try {
      for (const name of this.#inputNames(requests)) {
        const tensor = gatherInput(requests, name, this.#batching);
        if (!tensor) continue;
        const reshape = this.#inputs.get(name)?.reshape?.shape.map(Number);
        const dims = reshape ? (this.#batching ? [tensor.shape[0] ?? 1, ...reshape] : reshape) : tensor.shape;
        tensors.push({ tensor, dims });
        elements += dims.reduce((a, b) => a * b, 1);
      }
    } catch (error) {
      return failed(requests, error as Error, now() - start);
    }
    const fetches = this.#fetches(requests);
    const inline = this.#runsInline(elements);
    const feeds: WireTensor[] = [];
    const transfer = inline ? undefined : new Set<ArrayBuffer>();
    try {
      for (const { tensor, dims } of tensors) feeds.push(toOrtTensor(tensor, dims, transfer));
    } catch (error) {
      return failed(requests, error as Error, now() - start);
    }
    const inputDone = now();
    let outputs: WireTensor[];
    try {
      if (inline && this.#inline) {
        try {
          outputs = this.#inline.run(feeds, fetches);
        } catch (error) {
          throw new InferenceError("BACKEND_FAILED", { message: (error as Error).message });
        }
        this.#cost.observe(elements, Number(now() - inputDone));
      } else {
        if (this.#inline && !this.#host) this.#logMove(elements);
        const host = await this.#worker();
        // Only after a batch of one request: batches of several come under load, when the time
        // spent polling would be taken from the server's own thread.
        const hotWaitUs = requests.length === 1 ? this.#hotWaitUs : 0;
        const result = await host.execute({ feeds, fetches, hotWaitUs }, [...(transfer ?? [])]);
        if ("error" in result) throw new InferenceError("BACKEND_FAILED", { message: result.error });
        if (result.caught) this.#caught++;
        if (this.#inline) this.#cost.observe(elements, Number(result.inferNs));
        outputs = result.outputs;
      }
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const inferDone = now();
    const perRequest: Tensor[][] = requests.map(() => []);
    try {
      for (const wire of outputs) {
        const tensor = fromOrtTensor(wire, this.#outputs.get(wire.name), this.#batching);
        const parts = scatterOutput(tensor, batchSizes);
        for (let i = 0; i < parts.length; i++) perRequest[i]?.push(parts[i] as Tensor);
      }
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
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

  /**
   * The inputs to gather: the config's, then any a scheduler added (sequence controls, implicit
   * state). Every request of a plain model carries only config inputs: the config's list as is.
   */
  #inputNames(requests: readonly InferenceRequest[]): readonly string[] {
    let extra: Set<string> | undefined;
    for (const request of requests)
      for (const input of request.inputs) {
        if (this.#inputs.has(input.name)) continue;
        extra ??= new Set();
        extra.add(input.name);
      }
    return extra ? [...this.#configInputNames, ...extra] : this.#configInputNames;
  }

  /** The outputs to fetch: each request's, or every output for a request that names none. */
  #fetches(requests: readonly InferenceRequest[]): readonly string[] {
    if (requests.every((r) => r.outputs.length === 0)) return this.#outputNames;
    const wanted = new Set<string>();
    for (const request of requests) {
      if (request.outputs.length === 0) for (const name of this.#outputNames) wanted.add(name);
      else for (const o of request.outputs) wanted.add(o.name);
    }
    return [...wanted];
  }

  /** Release the session (waiting up to `graceMs` for a worker's), then stop the worker. */
  async close(graceMs?: number): Promise<void> {
    this.#closed = true;
    this.#inline?.release();
    this.#inline = undefined;
    const host = this.#host ?? (await this.#hostStarting?.catch(() => undefined));
    await host?.close(graceMs);
  }
}

function countElements(feeds: readonly WireTensor[]): number {
  return feeds.reduce((n, f) => n + f.dims.reduce((a, b) => a * b, 1), 0);
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

function failed(requests: readonly InferenceRequest[], error: Error, inputNs: bigint): ExecuteResult {
  return { responses: requests.map(() => error), computeInputNs: inputNs, computeInferNs: 0n, computeOutputNs: 0n };
}
