import type { ModelConfig } from "@galley/proto";
import type { Parameters, Tensor } from "./tensor.js";
import type { Trace } from "./trace.js";

/** An output the client asked for, with its parameters (`binary_data`, `classification`, ...). */
export interface RequestedOutput {
  name: string;
  parameters: Parameters;
}

/**
 * One inference request, protocol-neutral: frontends build it from gRPC `ModelInferRequest` or
 * the REST body, and the core never looks at the wire again. Input tensors view the bytes that
 * arrived.
 */
export interface InferenceRequest {
  modelName: string;
  /** Empty selects the highest ready version. */
  modelVersion: string;
  /** Echoed in the response; empty when the client gave none. */
  id: string;
  parameters: Parameters;
  inputs: Tensor[];
  /** Empty returns every output of the model. */
  outputs: RequestedOutput[];
  /** Aborted when the client goes away; the request is then cancelled. */
  signal?: AbortSignal;
  /**
   * Where a decoupled model's backend sends the request's responses, zero or many, then one
   * with `final`. The core sets it (see `InferenceServer.stream`); other models leave it unset.
   */
  responder?: Responder;
  /**
   * Set by the core on a default-mode model's request that came on a stream (gRPC
   * ModelStreamInfer, see `InferenceServer.stream`). Triton's stream writes such a request's first
   * response and drops any after it, where its HTTP and ModelInfer fail the request ("expected a
   * single response, got 2"): a backend whose model sent a response and then failed answers with
   * that response when this is set.
   */
  streamed?: boolean;
  /**
   * Called by the core with the config of the model version the request resolved to, before the
   * request is checked against it; it may rewrite `inputs`. The ensemble scheduler adds or removes
   * a step's batch dimension here, as Triton's does between batching and non-batching models.
   */
  adapt?: (config: ModelConfig) => void;
  /**
   * Outputs whose consumer takes them on a GPU (output name → CUDA ordinal): the next ensemble
   * step on that device, or a CUDA shared-memory region there. A backend whose instance runs on
   * that GPU may return them as device tensors (`Tensor.device`) instead of bytes. Set by the core
   * (see `InferenceServer.infer`) only for models with `BackendModel.deviceTensors`.
   */
  deviceOutputs?: ReadonlyMap<string, number>;
  /**
   * A BLS call's preferred memory (Triton's `preferred_memory`, GPU `n`): every output the model
   * makes on GPU `n` may come back there as a device tensor instead of bytes. The core turns it
   * into `deviceOutputs` for a model that runs on that GPU; from any other model the outputs are
   * host bytes, as Triton treats the preference.
   */
  outputsOnDevice?: number;
  /**
   * The same object for every execution of a request its model may reschedule (set by the
   * sequence batcher of an `iterative_sequence` model): what a backend keeps for the request from
   * one execution to the next (the device tensors its BLS calls hold) hangs on it.
   */
  iteration?: object;
  /**
   * The request's trace when the trace extension sampled it (or its parent's child, for an
   * ensemble step or a BLS call). Whoever made the trace ends it.
   */
  trace?: Trace;
}

/** One response of a decoupled model: outputs (possibly none), an error, or nothing but the final flag. */
export type DecoupledResponse = { outputs: Tensor[]; parameters: Parameters } | Error | undefined;

/** Receives a decoupled request's responses; called once with `final: true`, never after it. */
export type Responder = (response: DecoupledResponse, final: boolean) => void;

/** One response of {@link InferenceServer.stream}. */
export interface StreamedResponse {
  response: InferenceResponse;
  /** The request's last response. */
  final: boolean;
  /** A flag-only final: no response was produced, only the end of the request. */
  empty: boolean;
}

/** A response: the outputs requested, in request order (or config order when none were named). */
export interface InferenceResponse {
  modelName: string;
  modelVersion: string;
  id: string;
  parameters: Parameters;
  outputs: Tensor[];
}

/** A request's `priority` parameter (Triton's: 1 is the highest level, 0 the model's default), if it has a usable one. */
export function priorityOf(request: InferenceRequest): number | undefined {
  const value = request.parameters.priority;
  if (value === undefined || typeof value === "boolean" || typeof value === "string") return undefined;
  const n = Number(value);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/**
 * Whether two requests may share a batch: the same inputs, every one with equal non-batch
 * dimensions, except the inputs named in `ragged` (`allow_ragged_batch`).
 */
export function batchCompatible(a: InferenceRequest, b: InferenceRequest, ragged: ReadonlySet<string>): boolean {
  if (a.inputs.length !== b.inputs.length) return false;
  for (const input of a.inputs) {
    const other = b.inputs.find((i) => i.name === input.name);
    if (!other) return false;
    if (ragged.has(input.name)) continue;
    const x = input.shape;
    const y = other.shape;
    if (x.length !== y.length) return false;
    for (let d = 1; d < x.length; d++) if (x[d] !== y[d]) return false;
  }
  return true;
}
