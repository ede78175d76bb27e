import type { ModelOutput } from "@galley/proto";
import { datatype } from "../base/datatype.js";
import { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Tensor } from "../base/tensor.js";

/**
 * A typed-array view of a numeric tensor for a worker thread, and the buffer to move with it.
 * A movable, aligned tensor is moved without a copy (onnxruntime-node rejects shared memory, so
 * moving is the zero-copy path); anything else is copied once into a buffer of its own.
 */
export function workerView(tensor: Tensor): { view: ArrayBufferView; transfer: ArrayBuffer } {
  const info = datatype(tensor.datatype);
  const ArrayType = info?.array;
  if (!info || !ArrayType) throw new InferenceError("TENSOR_NO_TYPED_ARRAY", { datatype: tensor.datatype });
  const data = tensor.data;
  const count = data.byteLength / info.byteSize;
  if (tensor.movable && data.buffer instanceof ArrayBuffer && data.byteOffset % info.byteSize === 0) {
    return { view: new ArrayType(data.buffer, data.byteOffset, count), transfer: data.buffer };
  }
  const own = new ArrayBuffer(data.byteLength);
  new Uint8Array(own).set(data);
  return { view: new ArrayType(own, 0, count), transfer: own };
}

/**
 * One input of several requests as a single tensor along the batch dimension: the requests'
 * bytes concatenated once. A single request passes through unchanged.
 */
export function gatherInput(
  requests: readonly InferenceRequest[],
  name: string,
  batching: boolean,
): Tensor | undefined {
  const parts = requests.map((r) => r.inputs.find((i) => i.name === name));
  const first = parts[0];
  if (!first) return undefined;
  if (parts.length === 1) return first;
  if (!batching || parts.some((p) => !p)) throw new InferenceError("BATCH_INPUT_UNBATCHABLE", { input: name });
  const tensors = parts as Tensor[];
  const size = tensors.reduce((n, t) => n + t.data.byteLength, 0);
  const data = new Uint8Array(size);
  let at = 0;
  for (const t of tensors) {
    data.set(t.data, at);
    at += t.data.byteLength;
  }
  const batch = tensors.reduce((n, t) => n + (t.shape[0] ?? 0), 0);
  return { ...first, shape: [batch, ...first.shape.slice(1)], data, movable: true };
}

/**
 * Split one batched output back into per-request tensors along the first dimension: views of
 * the output, no copies. BYTES outputs are split element by element. The parts share one buffer,
 * so none of them is movable: moving one to a worker would detach its neighbours' data.
 */
export function scatterOutput(output: Tensor, batchSizes: readonly number[]): Tensor[] {
  if (batchSizes.length === 1) return [output];
  const total = output.shape[0] ?? 0;
  const rowElements = output.shape.slice(1).reduce((a, b) => a * b, 1);
  const info = datatype(output.datatype);
  const out: Tensor[] = [];
  if (info && info.byteSize > 0) {
    const rowBytes = rowElements * info.byteSize;
    let at = 0;
    for (const size of batchSizes) {
      out.push({
        ...output,
        shape: [size, ...output.shape.slice(1)],
        data: output.data.subarray(at, at + size * rowBytes),
        movable: false,
      });
      at += size * rowBytes;
    }
    return out;
  }
  const view = new DataView(output.data.buffer, output.data.byteOffset, output.data.byteLength);
  let at = 0;
  for (const size of batchSizes) {
    const start = at;
    for (let e = 0; e < size * rowElements; e++) at += 4 + view.getUint32(at, true);
    out.push({
      ...output,
      shape: [size, ...output.shape.slice(1)],
      data: output.data.subarray(start, at),
      movable: false,
    });
  }
  if (batchSizes.reduce((a, b) => a + b, 0) !== total) {
    throw new InferenceError("BATCH_OUTPUT_ROWS", { output: output.name, rows: total });
  }
  return out;
}

/**
 * An output's shape as the config gives it: the model's `shape` where the output has no
 * `reshape`, else the config's dims (a -1 taking what is left of the elements) after the batch
 * dimension, if the model batches.
 */
export function configOutputShape(shape: number[], spec: ModelOutput | undefined, batching: boolean): number[] {
  if (!spec?.reshape) return shape;
  const dims = spec.dims.map(Number);
  const batch = batching ? [shape[0] ?? 1] : [];
  const total = shape.slice(batch.length).reduce((a, b) => a * b, 1);
  const known = dims.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
  return [...batch, ...dims.map((d) => (d === -1 ? total / known : d))];
}
