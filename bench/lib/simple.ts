// The `simple` example model and the requests every benchmark sends to it: INT32 INPUT0/INPUT1
// [1,16] → OUTPUT0 = sum, OUTPUT1 = difference. The same bytes go to every server (the request
// bodies are built in workload.ts, for this model and the identity alike).
import { fileURLToPath } from "node:url";

export const REPOSITORY = fileURLToPath(new URL("../../examples/model_repository", import.meta.url));
export const MODEL_FILE = fileURLToPath(
  new URL("../../examples/model_repository/simple/1/model.onnx", import.meta.url),
);
export const MODEL = "simple";

export const INPUT0 = Int32Array.from({ length: 16 }, (_, i) => i);
export const INPUT1 = Int32Array.from({ length: 16 }, () => 1);
export const SHAPE = [1, 16];
/** Bytes of one input or output tensor. */
export const TENSOR_BYTES = 16 * 4;

export const EXPECTED_SUM = INPUT0.map((v, i) => v + (INPUT1[i] as number));
export const EXPECTED_DIFFERENCE = INPUT0.map((v, i) => v - (INPUT1[i] as number));

/** Int32 values of little-endian bytes, copied (the view may be unaligned, or a Buffer's pool). */
export function int32s(bytes: Uint8Array): Int32Array {
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Int32Array(copy.buffer);
}
