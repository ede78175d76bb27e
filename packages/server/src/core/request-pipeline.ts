// The one request pipeline of the core: what every inference goes through between a frontend
// (or an ensemble step, or a BLS call, which come through the same `InferenceServer` methods) and
// the model's scheduler — tensors placed, the request checked against the config, the response
// cache, scheduling, outputs shaped (requested ones, classification), shared-memory outputs
// written, and the model's statistics counted one way, as Triton counts them.
import { Platform } from "@galley/config";
import { createAsyncQueue } from "../base/async-queue.js";
import { now } from "../base/clock.js";
import { backendError, InferenceError, toInferenceError } from "../base/errors.js";
import type {
  DecoupledResponse,
  InferenceRequest,
  InferenceResponse,
  Responder,
  StreamedResponse,
} from "../base/inference-request.js";
import type { ModelStatistics } from "../base/statistics.js";
import type { Parameters, Tensor } from "../base/tensor.js";
import { validateRequest } from "../base/validate-request.js";
import type { ResponseCache } from "../cache/response-cache.js";
import type { LoadedModel } from "../repository/loaded-model.js";
import { classify } from "./classification.js";
import { ANY_GPU, finishOutputs, type Placement, placeInputs, planDeviceOutputs } from "./device-placement.js";
import type { GpuCopies } from "./gpu-copy.js";
import type { SharedMemoryManager } from "./shared-memory.js";

const NO_HOLDS: readonly (() => void)[] = [];

/**
 * Triton's failure reason for a request's error: REJECTED for a request the scheduler's queue
 * policy refused (queue full, timed out in the queue, or waited out `--gpu-memory-wait-secs` for
 * GPU memory), CANCELED, BACKEND for what the backend or
 * the model raised, OTHER for everything else (the request itself, the server).
 */
export function failureReason(failure: InferenceError): keyof ModelStatistics["failures"] {
  if (failure.id === "QUEUE_FULL" || failure.id === "QUEUE_TIMEOUT" || failure.id === "GPU_MEMORY_SHORT")
    return "REJECTED";
  if (failure.code === "CANCELLED") return "CANCELED";
  if (failure.id === "BACKEND_FAILED") return "BACKEND";
  return "OTHER";
}

/** Check `request` against the model's config: its batch size; a request refused counts as OTHER. */
function admit(request: InferenceRequest, model: LoadedModel, start: bigint): number {
  try {
    return validateRequest(request, model.config);
  } catch (error) {
    model.stats.recordFailure(now() - start, "OTHER");
    throw error;
  }
}

/** The pipeline over a server's shared-memory regions, response cache and copies between its GPUs. */
export class RequestPipeline {
  constructor(
    readonly sharedMemory: SharedMemoryManager,
    readonly cache: ResponseCache | undefined,
    readonly gpus?: GpuCopies,
  ) {}

  /**
   * Run one request of a default-mode model: bring its tensors into place, check it against the
   * config, answer it from the cache or schedule it, shape its outputs, write those that go to
   * shared memory, and count it in the model's statistics.
   */
  async infer(model: LoadedModel, request: InferenceRequest, start: bigint): Promise<InferenceResponse> {
    if (model.decoupled) throw new InferenceError("DECOUPLED_INFER", { model: model.name });
    // The regions it names stay registered until it ends, as Triton's requests hold theirs.
    const regions = this.sharedMemory.holdFor(request);
    model.stats.inflight++;
    try {
      request.adapt?.(model.config);
      const cache = model.config.responseCache?.enable ? this.cache : undefined;
      const placed = this.#placeTensors(request, model, cache !== undefined);
      const holds = placed instanceof Promise ? await placed : placed;
      try {
        return await this.#infer(request, model, cache, start);
      } finally {
        for (const release of holds) release();
      }
    } finally {
      model.stats.inflight--;
      regions();
    }
  }

  async #infer(
    request: InferenceRequest,
    model: LoadedModel,
    cache: ResponseCache | undefined,
    start: bigint,
  ): Promise<InferenceResponse> {
    const batchSize = admit(request, model, start);
    let key: string | undefined;
    if (cache) {
      const lookup = now();
      key = cache.key(request, model.name, model.version);
      const hit = cache.get(key);
      if (hit) {
        model.stats.recordCacheHit(now() - lookup);
        const response = this.#response(request, model, hit, batchSize);
        const written = this.#writeSharedOutputs(request, response);
        if (written) await written;
        const total = now() - start;
        model.stats.recordFirstResponse(total);
        model.stats.recordSuccess(total, 0n);
        return response;
      }
    }
    try {
      const trace = request.trace;
      if (trace) {
        trace.capture("QUEUE_START");
        trace.captureTensors("TENSOR_QUEUE_INPUT", request.inputs);
      }
      const { outputs, queueNs, parameters } = await model.scheduler.enqueue(request, batchSize);
      trace?.captureTensors("TENSOR_BACKEND_OUTPUT", outputs);
      if (cache && key !== undefined) {
        const insert = now();
        cache.put(key, outputs);
        model.stats.recordCacheMiss(now() - insert);
      }
      const response = this.#response(request, model, outputs, batchSize, parameters);
      const written = this.#writeSharedOutputs(request, response);
      if (written) await written;
      const total = now() - start;
      model.stats.recordFirstResponse(total);
      model.stats.recordSuccess(total, queueNs);
      return response;
    } catch (error) {
      const failure = toInferenceError(error);
      const total = now() - start;
      // Accepted, then answered with an error (the model's, a queue's rejection, a cancellation):
      // Triton sends that as a response, and observes it as the first.
      model.stats.recordFirstResponse(total);
      model.stats.recordFailure(total, failureReason(failure));
      throw failure;
    }
  }

  /**
   * Run one request of a decoupled model and yield its responses as they come (then a last one
   * marked `final`, possibly `empty`); leaving the loop early cancels the request.
   */
  async *stream(model: LoadedModel, request: InferenceRequest): AsyncGenerator<StreamedResponse> {
    const regions = this.sharedMemory.holdFor(request);
    model.stats.inflight++;
    try {
      yield* this.#stream(model, request);
    } finally {
      model.stats.inflight--;
      regions();
    }
  }

  async *#stream(model: LoadedModel, request: InferenceRequest): AsyncGenerator<StreamedResponse> {
    const start = now();
    request.trace?.start(model.name, model.version, request.id, start);
    request.adapt?.(model.config);
    // As for one response: inputs on the GPU of a model that takes them there stay, and device
    // outputs go into CUDA regions device to device; the tensors live until the final response.
    const holds = await this.#placeTensors(request, model, false);
    try {
      yield* this.#streamPlaced(model, request, start);
    } finally {
      for (const release of holds) release();
    }
  }

  async *#streamPlaced(model: LoadedModel, request: InferenceRequest, start: bigint): AsyncGenerator<StreamedResponse> {
    let batchSize: number;
    try {
      batchSize = admit(request, model, start);
    } catch (error) {
      request.trace?.capture("REQUEST_END");
      throw error;
    }
    const queue = createAsyncQueue<{ response: DecoupledResponse; final: boolean }>();
    let finished = false;
    const abort = new AbortController();
    const signal = request.signal ? AbortSignal.any([request.signal, abort.signal]) : abort.signal;
    const responder: Responder = (response, final) => {
      if (finished) return;
      if (final) finished = true;
      queue.push({ response, final });
    };
    let queueNs = 0n;
    request.trace?.capture("QUEUE_START");
    request.trace?.captureTensors("TENSOR_QUEUE_INPUT", request.inputs);
    const scheduled = model.scheduler.enqueue({ ...request, signal, responder }, batchSize).then(
      (result) => {
        queueNs = result.queueNs;
      },
      (error: unknown) => responder(toInferenceError(error), true),
    );
    let done = false;
    let first = true;
    try {
      // Never ended: the model's final response returns from the loop.
      for await (const { response, final } of queue) {
        // Triton observes the first response the model sends (an error one too), not a bare final flag.
        if (first && response !== undefined) {
          first = false;
          model.stats.recordFirstResponse(now() - start);
        }
        // An error response is the model's own: a backend failure, as an error it raises.
        if (response instanceof Error) throw backendError(response);
        if (response) request.trace?.captureTensors("TENSOR_BACKEND_OUTPUT", response.outputs);
        const outputs = response ? this.#shapeOutputs(request, model, response.outputs, batchSize) : [];
        const shaped: InferenceResponse = {
          modelName: model.name,
          modelVersion: String(model.version),
          id: request.id,
          parameters: response?.parameters ?? {},
          outputs,
        };
        await this.#writeSharedOutputs(request, shaped);
        yield {
          response: shaped,
          final,
          empty: response === undefined,
        };
        if (final) {
          done = true;
          await scheduled;
          model.stats.recordSuccess(now() - start, queueNs);
          request.trace?.capture("REQUEST_END");
          return;
        }
      }
    } catch (error) {
      request.trace?.capture("REQUEST_END");
      const failure = toInferenceError(error);
      model.stats.recordFailure(now() - start, failureReason(failure));
      throw failure;
    } finally {
      // Leaving early (the consumer stopped listening) cancels the request.
      if (!done) abort.abort();
    }
  }

  /**
   * Bring a request's tensors where the model reads them (before validation): shared-memory
   * inputs read into buffers of their own, or left in place on the GPU of a model that takes
   * device tensors there (`BackendModel.deviceTensors`, without a response cache, which reads the
   * bytes); which outputs the backend may keep on the device. Returns the region holds to release.
   */
  #placeTensors(
    request: InferenceRequest,
    model: LoadedModel,
    cached: boolean,
  ): readonly (() => void)[] | Promise<(() => void)[]> {
    const placement = cached
      ? undefined
      : (model.backend.deviceTensors ?? (model.config.platform === Platform.ensemble ? ANY_GPU : undefined));
    // Host tensors for a host model (most requests): nothing to read, copy or plan.
    if (
      placement === undefined &&
      !request.inputs.some((i) => i.sharedMemory !== undefined || i.device !== undefined)
    ) {
      delete request.deviceOutputs;
      return NO_HOLDS;
    }
    return this.#placeOnDevice(request, model, placement);
  }

  async #placeOnDevice(request: InferenceRequest, model: LoadedModel, placement: Placement): Promise<(() => void)[]> {
    const holds: (() => void)[] = [];
    try {
      await placeInputs(request, this.sharedMemory, model.name, placement, holds, this.gpus);
      planDeviceOutputs(
        request,
        this.sharedMemory,
        placement,
        model.config.output.map((o) => o.name),
      );
    } catch (error) {
      for (const release of holds) release();
      throw error;
    }
    return holds;
  }

  /**
   * Write outputs that asked for shared memory into their regions (they leave the response empty)
   * and bring device outputs to the host; undefined when there are none (most responses).
   */
  #writeSharedOutputs(request: InferenceRequest, response: InferenceResponse): Promise<void> | undefined {
    if (
      !response.outputs.some((o) => o.device !== undefined) &&
      !request.outputs.some((o) => o.parameters.shared_memory_region !== undefined)
    )
      return undefined;
    return finishOutputs(request, response, this.sharedMemory, response.modelName);
  }

  #response(
    request: InferenceRequest,
    model: LoadedModel,
    outputs: Tensor[],
    batchSize: number,
    parameters: Parameters = {},
  ): InferenceResponse {
    return {
      modelName: model.name,
      modelVersion: String(model.version),
      id: request.id,
      parameters,
      outputs: this.#shapeOutputs(request, model, outputs, batchSize),
    };
  }

  /** Requested outputs in request order (config order when none named), classified where asked. */
  #shapeOutputs(request: InferenceRequest, model: LoadedModel, outputs: Tensor[], batchSize: number): Tensor[] {
    if (request.outputs.length === 0) return outputs;
    const byName = new Map(outputs.map((o) => [o.name, o]));
    return request.outputs.flatMap((requested) => {
      const tensor = byName.get(requested.name);
      if (!tensor) return [];
      const count = requested.parameters.classification;
      if (count === undefined) return [{ ...tensor, parameters: {} }];
      const n = Number(count);
      if (!Number.isInteger(n) || n < 0) {
        throw new InferenceError("CLASSIFICATION_BAD_COUNT", { count: String(count), output: requested.name });
      }
      return [classify(tensor, n, model.config.maxBatchSize > 0 ? batchSize : 0, model.labels.get(requested.name))];
    });
  }
}
