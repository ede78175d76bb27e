// A batch's tensors at the backend boundary, shared by the backends: inputs gathered into one
// batch, outputs checked against the model's config (each backend's outputs, whatever made them),
// scattered back per request, and moved to a worker thread without a copy where they can be.
import { countBytesElements, type ModelConfig, type ModelOutput } from "@galley/proto";
import { datatype } from "../base/datatype.js";
import { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { elementCount, type Tensor } from "../base/tensor.js";

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

/** What a model's outputs may be named, from its config: see {@link outputRules} and {@link checkOutputs}. */
export interface OutputRules {
  readonly model: string;
  readonly batching: boolean;
  /** The config's outputs and, for sequence batching, the implicit state outputs. */
  readonly outputs: ReadonlySet<string>;
  /** The config's outputs, in config order: what a request that names none receives. */
  readonly all: readonly string[];
}

/** The rules {@link checkOutputs} applies, built once per loaded model. */
export function outputRules(config: ModelConfig): OutputRules {
  const outputs = new Set(config.output.map((o) => o.name));
  if (config.schedulingChoice.case === "sequenceBatching") {
    for (const s of config.schedulingChoice.value.state) outputs.add(s.outputName);
  }
  return { model: config.name, batching: config.maxBatchSize > 0, outputs, all: config.output.map((o) => o.name) };
}

/**
 * Check one request's outputs, as a backend produced them, as Triton's core does
 * (`InferenceResponse::AddOutput`): every name is an output of the model (or a sequence state's),
 * and comes once. The datatype and shape are the tensor's own, returned as the model made them
 * (an INT64 sum into a TYPE_INT32 output, FP16 into TYPE_FP32): only a tensor inconsistent in
 * itself is refused, one of an unknown datatype or whose bytes do not fit its shape. A requested
 * output the model did not produce is left out of the response. Returns the first problem,
 * naming the output, or undefined.
 */
export function checkOutputs(
  rules: OutputRules,
  _request: InferenceRequest,
  outputs: readonly Tensor[],
): InferenceError | undefined {
  const model = rules.model;
  for (const [i, output] of outputs.entries()) {
    if (!rules.outputs.has(output.name)) return new InferenceError("OUTPUT_UNKNOWN", { output: output.name, model });
    for (let j = 0; j < i; j++) {
      if (outputs[j]?.name === output.name) {
        return new InferenceError("OUTPUT_DUPLICATE", { output: output.name, model });
      }
    }
    const problem = inconsistency(output, model);
    if (problem) return problem;
  }
  return undefined;
}

/** Why a tensor cannot be what it says it is: an unknown datatype, or bytes that do not fit its shape. */
function inconsistency(output: Tensor, model: string): InferenceError | undefined {
  const info = datatype(output.datatype);
  if (!info)
    return new InferenceError("OUTPUT_UNKNOWN_DATATYPE", { output: output.name, model, datatype: output.datatype });
  const count = elementCount(output.shape);
  const shape = output.shape.join(",");
  if (info.byteSize === 0) {
    const elements = countBytesElements(output.data);
    if (elements === count) return undefined;
    return new InferenceError("OUTPUT_ELEMENT_COUNT", {
      output: output.name,
      model,
      count: elements < 0 ? "unreadable" : elements,
      shape,
      expected: count,
    });
  }
  const bytes = output.device ? output.device.byteSize : output.data.byteLength;
  if (bytes === count * info.byteSize) return undefined;
  return new InferenceError("OUTPUT_BYTE_SIZE", {
    output: output.name,
    model,
    bytes,
    shape,
    datatype: info.name,
    expected: count * info.byteSize,
  });
}
