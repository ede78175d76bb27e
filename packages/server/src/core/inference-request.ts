import type { Parameters, Tensor } from "./tensor.js";

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
}

/** A response: the outputs requested, in request order (or config order when none were named). */
export interface InferenceResponse {
  modelName: string;
  modelVersion: string;
  id: string;
  parameters: Parameters;
  outputs: Tensor[];
}
