import type { InferenceResponse } from "../../base/inference-request.js";
import type { ParameterValue } from "../../base/tensor.js";
import type { OutputPlan } from "./infer-request.js";
import { writeTensorJson } from "./json-tensor.js";
import { JsonWriter } from "./json-write.js";

/** An encoded inference reply: the parts to write in order, and their headers. */
export interface EncodedResponse {
  /** The JSON header, then each binary output's bytes (views of the outputs, not copies). */
  parts: Uint8Array[];
  headers: Record<string, string>;
}

/**
 * Encode a response as Triton does (PROTOCOL.md §1.3, §1.5): keys `id` (when non-empty),
 * `model_name`, `model_version`, `parameters` (when any), `outputs`; each output `name`,
 * `datatype`, `shape`, then `parameters.binary_data_size` (binary) or flat `data` (JSON). With
 * any non-empty binary output the reply is `application/octet-stream` with
 * `Inference-Header-Content-Length` (the uncompressed JSON length).
 */
export function encodeInferResponse(response: InferenceResponse, plan: OutputPlan): EncodedResponse {
  const w = new JsonWriter();
  w.raw("{");
  if (response.id !== "") w.raw('"id":').string(response.id).raw(",");
  w.raw('"model_name":').string(response.modelName).raw(',"model_version":').string(response.modelVersion);
  const parameters = Object.entries(response.parameters);
  if (parameters.length > 0) {
    w.raw(',"parameters":{');
    parameters.forEach(([key, value], i) => {
      if (i > 0) w.raw(",");
      w.string(key).raw(":");
      writeParameter(w, value);
    });
    w.raw("}");
  }
  w.raw(',"outputs":[');
  const blobs: Uint8Array[] = [];
  response.outputs.forEach((output, i) => {
    if (i > 0) w.raw(",");
    w.raw('{"name":').string(output.name).raw(',"datatype":').string(output.datatype);
    w.raw(`,"shape":[${output.shape.join(",")}]`);
    // An output delivered through shared memory carries no data and no parameters.
    if (!output.sharedMemory) {
      if (plan.listed.get(output.name) ?? plan.binaryByDefault) {
        w.raw(`,"parameters":{"binary_data_size":${output.data.byteLength}}`);
        if (output.data.byteLength > 0) blobs.push(output.data);
      } else {
        w.raw(',"data":');
        writeTensorJson(w, output);
      }
    }
    w.raw("}");
  });
  w.raw("]}");
  const header = w.bytes();
  if (blobs.length === 0) return { parts: [header], headers: { "Content-Type": "application/json" } };
  return {
    parts: [header, ...blobs],
    headers: {
      "Content-Type": "application/octet-stream",
      "Inference-Header-Content-Length": String(header.byteLength),
    },
  };
}

/** A response parameter: bool, int (bigint or integral number), double or string. */
export function writeParameter(w: JsonWriter, value: ParameterValue): void {
  if (typeof value === "number" && !Number.isInteger(value)) w.double(value);
  else w.value(value);
}
