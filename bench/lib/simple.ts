// The `simple` example model and the requests every benchmark sends to it: INT32 INPUT0/INPUT1
// [1,16] → OUTPUT0 = sum, OUTPUT1 = difference. The same bytes go to every server.
import { fileURLToPath } from "node:url";

export const REPOSITORY = fileURLToPath(new URL("../../examples/model_repository", import.meta.url));
export const MODEL_FILE = fileURLToPath(
  new URL("../../examples/model_repository/simple/1/model.onnx", import.meta.url),
);
export const MODEL = "simple";
export const INFER_PATH = `/v2/models/${MODEL}/infer`;

export const INPUT0 = Int32Array.from({ length: 16 }, (_, i) => i);
export const INPUT1 = Int32Array.from({ length: 16 }, () => 1);
export const SHAPE = [1, 16];
/** Bytes of one input or output tensor. */
export const TENSOR_BYTES = 16 * 4;

export const EXPECTED_SUM = INPUT0.map((v, i) => v + (INPUT1[i] as number));
export const EXPECTED_DIFFERENCE = INPUT0.map((v, i) => v - (INPUT1[i] as number));

export function bytesOf(values: Int32Array): Uint8Array {
  return new Uint8Array(values.buffer.slice(0), values.byteOffset, values.byteLength);
}

/** A KServe v2 JSON request (PROTOCOL.md §1.3), as every JSON client and server here uses it. */
export function jsonBody(): Buffer {
  const input = (name: string, data: Int32Array) => ({ name, shape: SHAPE, datatype: "INT32", data: [...data] });
  return Buffer.from(JSON.stringify({ inputs: [input("INPUT0", INPUT0), input("INPUT1", INPUT1)] }));
}

/** A binary-tensor request (PROTOCOL.md §1.5): JSON header, then the two input blobs. */
export function binaryBody(): { body: Buffer; headerLength: number } {
  const input = (name: string) => ({
    name,
    shape: SHAPE,
    datatype: "INT32",
    parameters: { binary_data_size: TENSOR_BYTES },
  });
  const output = (name: string) => ({ name, parameters: { binary_data: true } });
  const header = Buffer.from(
    JSON.stringify({
      inputs: [input("INPUT0"), input("INPUT1")],
      outputs: [output("OUTPUT0"), output("OUTPUT1")],
    }),
  );
  return { body: Buffer.concat([header, bytesOf(INPUT0), bytesOf(INPUT1)]), headerLength: header.byteLength };
}

/** Whether two output tensors hold the expected sum and difference. */
export function checkOutputs(sum: ArrayLike<number>, difference: ArrayLike<number>): boolean {
  const same = (a: ArrayLike<number>, b: Int32Array) => a.length === b.length && b.every((v, i) => a[i] === v);
  return same(sum, EXPECTED_SUM) && same(difference, EXPECTED_DIFFERENCE);
}

/** Int32 values of little-endian bytes, copied (the view may be unaligned, or a Buffer's pool). */
export function int32s(bytes: Uint8Array): Int32Array {
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Int32Array(copy.buffer);
}
