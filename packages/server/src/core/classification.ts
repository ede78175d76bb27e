import { encodeBytesElements } from "@galley/proto";
import { datatype } from "../base/datatype.js";
import { InferenceError } from "../base/errors.js";
import { elementCount, type Tensor } from "../base/tensor.js";

const encoder = new TextEncoder();

/**
 * The classification extension (PROTOCOL.md §1.8): replace an output by its top `count` classes
 * per batch element, as BYTES `"<value>:<index>[:<label>]"` with C++ `std::to_string` formatting
 * of the value. `batchSize` is 0 for a model that does not batch.
 */
export function classify(
  output: Tensor,
  count: number,
  batchSize: number,
  labels: readonly string[] | undefined,
): Tensor {
  const info = datatype(output.datatype);
  if (!info?.array || output.datatype === "FP16" || output.datatype === "BF16") {
    throw new InferenceError("CLASSIFICATION_BYTES", { datatype: output.datatype });
  }
  const batches = batchSize > 0 ? batchSize : 1;
  const total = elementCount(output.shape);
  const perBatch = batches > 0 ? total / batches : total;
  const k = Math.min(count, perBatch);
  const values = toNumbers(output, total);
  const integral = !output.datatype.startsWith("FP");
  const elements: Uint8Array[] = [];
  for (let b = 0; b < batches; b++) {
    const start = b * perBatch;
    const order = Array.from({ length: perBatch }, (_, i) => i);
    // Stable: equal values keep index order, as std::stable_sort would.
    order.sort((x, y) => (values[start + y] ?? 0) - (values[start + x] ?? 0) || x - y);
    for (const index of order.slice(0, k)) {
      const value = values[start + index] ?? 0;
      const text = `${integral ? String(Math.trunc(value)) : value.toFixed(6)}:${index}${labels?.[index] !== undefined ? `:${labels[index]}` : ""}`;
      elements.push(encoder.encode(text));
    }
  }
  return {
    name: output.name,
    datatype: "BYTES",
    shape: batchSize > 0 ? [batches, k] : [k],
    data: encodeBytesElements(elements),
    parameters: {},
  };
}

function toNumbers(tensor: Tensor, count: number): number[] {
  const info = datatype(tensor.datatype);
  const ArrayType = info?.array;
  if (!ArrayType) return [];
  const aligned = tensor.data.byteOffset % (info.byteSize || 1) === 0;
  const bytes = aligned ? tensor.data : new Uint8Array(tensor.data);
  const view = new ArrayType(bytes.buffer as ArrayBuffer, bytes.byteOffset, count);
  return ArrayType === BigInt64Array || ArrayType === BigUint64Array
    ? [...(view as BigInt64Array)].map(Number)
    : [...(view as Float32Array)];
}
