import type { InferenceResponse } from "../../base/inference-request.js";
import type { Tensor } from "../../base/tensor.js";
import { writeParameter } from "./infer-response.js";
import { writeTensorJson } from "./json-tensor.js";
import { JsonWriter } from "./json-write.js";

/**
 * Encode one generate response (PROTOCOL.md §1.10, Triton's `GenerateRequestClass::
 * FinalizeResponse`): one flat object of `id` (when non-empty), `model_name`, `model_version`,
 * each response parameter and each output by name, a single-element output as a bare value.
 * As in Triton (a `std::map`), keys come out in byte order and the first of equal names wins:
 * id and model fields, then parameters, then outputs.
 *
 * @throws {@link InferenceError} for outputs JSON cannot carry (FP16, BF16).
 */
export function encodeGenerateResponse(response: InferenceResponse): Buffer {
  const fields = new Map<string, Uint8Array>();
  const put = (key: string, value: () => Uint8Array) => {
    if (!fields.has(key)) fields.set(key, value());
  };
  const json = (write: (w: JsonWriter) => unknown) => {
    const w = new JsonWriter();
    write(w);
    return w.bytes();
  };
  if (response.id !== "") put("id", () => json((w) => w.string(response.id)));
  put("model_name", () => json((w) => w.string(response.modelName)));
  put("model_version", () => json((w) => w.string(response.modelVersion)));
  for (const [key, value] of Object.entries(response.parameters)) {
    put(key, () => json((w) => writeParameter(w, value)));
  }
  for (const output of response.outputs) put(output.name, () => outputJson(output));

  const keys = [...fields.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const parts: Uint8Array[] = [];
  keys.forEach((key, i) => {
    parts.push(
      Buffer.from(
        new JsonWriter()
          .raw(i === 0 ? "{" : ",")
          .string(key)
          .raw(":")
          .bytes(),
      ),
    );
    parts.push(fields.get(key) as Uint8Array);
  });
  parts.push(Buffer.from(keys.length === 0 ? "{}" : "}"));
  return Buffer.concat(parts);
}

/** An output's flat JSON array, or its one element without the brackets. */
function outputJson(output: Tensor): Uint8Array {
  const w = new JsonWriter();
  writeTensorJson(w, output);
  const array = w.bytes();
  const single = output.shape.reduce((n, d) => n * d, 1) === 1;
  return single ? array.subarray(1, array.length - 1) : array;
}
