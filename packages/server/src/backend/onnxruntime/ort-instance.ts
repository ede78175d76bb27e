import type { ModelConfig, ModelOutput, ModelRateLimiter } from "@galley/proto";
import { now } from "../../clock/clock.js";
import { InferenceError } from "../../core/errors.js";
import type { InferenceRequest } from "../../core/inference-request.js";
import type { Tensor } from "../../core/tensor.js";
import type { Logger } from "../../log.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { gatherInput, scatterOutput } from "../batch-io.js";
import { checkOutputs, type OutputRules, outputRules } from "../check-outputs.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import { workerEntry } from "../host/worker-entry.js";
import { workerTransport } from "../host/worker-transport.js";
import type { OrtProtocol, OrtSessionSettings, SessionIO, WireTensor } from "./ort-messages.js";
import { fromOrtTensor, toOrtTensor } from "./ort-tensors.js";

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
}

/** One instance: gathers the batch, runs it in the session's worker, and splits the outputs per request. */
export class OrtInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #host: InstanceHost<OrtProtocol>;
  readonly #config: ModelConfig;
  readonly #batching: boolean;
  readonly #outputs: Map<string, ModelOutput>;
  readonly #inputs: Map<string, ModelConfig["input"][number]>;
  readonly #rules: OutputRules;

  private constructor(host: InstanceHost<OrtProtocol>, config: ModelConfig, rateLimiter?: ModelRateLimiter) {
    this.name = host.name;
    if (rateLimiter) this.rateLimiter = rateLimiter;
    this.#host = host;
    this.#config = config;
    this.#batching = config.maxBatchSize > 0;
    this.#outputs = new Map(config.output.map((o) => [o.name, o]));
    this.#inputs = new Map(config.input.map((i) => [i.name, i]));
    this.#rules = outputRules(config);
  }

  /** Start a worker and load the model in it; rejects with onnxruntime's message when it does not load. */
  static async start(options: OrtInstanceOptions): Promise<OrtInstance> {
    const host = createOrtHost({ ...options, model: options.config.name });
    await host.start(options.signal);
    return new OrtInstance(host, options.config, options.rateLimiter);
  }

  /** The model's inputs and outputs, as the session reports them. */
  get io(): SessionIO {
    return this.#host.info ?? { inputs: [], outputs: [] };
  }

  /** False while the session's worker is down: restarting after a failure, or waiting to. */
  get healthy(): boolean {
    return this.#host.health === "up";
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    const batchSizes = requests.map((r) => (this.#batching ? (r.inputs[0]?.shape[0] ?? 1) : 1));
    const feeds: WireTensor[] = [];
    const transfer = new Set<ArrayBuffer>();
    try {
      // Config inputs, then what a scheduler added (sequence controls, implicit state).
      const names = new Set([
        ...this.#config.input.map((i) => i.name),
        ...requests.flatMap((r) => r.inputs.map((i) => i.name)),
      ]);
      for (const name of names) {
        const tensor = gatherInput(requests, name, this.#batching);
        if (!tensor) continue;
        const reshape = this.#inputs.get(name)?.reshape?.shape.map(Number);
        const dims = reshape ? (this.#batching ? [tensor.shape[0] ?? 1, ...reshape] : reshape) : tensor.shape;
        feeds.push(toOrtTensor(tensor, dims, transfer));
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
    let outputs: WireTensor[];
    try {
      const result = await this.#host.execute({ feeds, fetches: [...wanted] }, [...transfer]);
      if ("error" in result) throw new InferenceError("BACKEND_FAILED", { message: result.error });
      outputs = result.outputs;
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const inferDone = now();
    const perRequest: Tensor[][] = requests.map(() => []);
    try {
      for (const wire of outputs) {
        const tensor = fromOrtTensor(wire, this.#outputs.get(wire.name), this.#batching);
        for (const [i, part] of scatterOutput(tensor, batchSizes).entries()) perRequest[i]?.push(part);
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

  /** Release the session (waiting up to `graceMs` for it), then stop the worker. */
  close(graceMs?: number): Promise<void> {
    return this.#host.close(graceMs);
  }
}

function failed(requests: readonly InferenceRequest[], error: Error, inputNs: bigint): ExecuteResult {
  return { responses: requests.map(() => error), computeInputNs: inputNs, computeInferNs: 0n, computeOutputNs: 0n };
}
