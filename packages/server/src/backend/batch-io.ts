// A batch's tensors at the backend boundary, shared by the backends: inputs gathered into one
// batch, outputs checked against the model's config (each backend's outputs, whatever made them),
// scattered back per request, and moved to a worker thread without a copy where they can be.
import { dataTypeToProtocol } from "@galley/config";
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

interface OutputRule {
  datatype: string;
  /** The config's dims (-1 for any size), without the batch dimension; undefined: not checked. */
  dims?: readonly number[];
}

/** What a model's outputs must look like, from its config: see {@link outputRules} and {@link checkOutputs}. */
export interface OutputRules {
  readonly model: string;
  readonly batching: boolean;
  readonly outputs: ReadonlyMap<string, OutputRule>;
  /** The config's outputs, in config order: what a request that names none receives. */
  readonly all: readonly string[];
}

/**
 * The rules {@link checkOutputs} applies, built once per loaded model: the config's outputs and,
 * for sequence batching, the implicit state outputs (datatype only; they are never required).
 */
export function outputRules(config: ModelConfig): OutputRules {
  const outputs = new Map<string, OutputRule>();
  for (const o of config.output) {
    outputs.set(o.name, { datatype: dataTypeToProtocol(o.dataType), dims: o.dims.map(Number) });
  }
  if (config.schedulingChoice.case === "sequenceBatching") {
    for (const s of config.schedulingChoice.value.state) {
      if (!outputs.has(s.outputName)) outputs.set(s.outputName, { datatype: dataTypeToProtocol(s.dataType) });
    }
  }
  return {
    model: config.name,
    batching: config.maxBatchSize > 0,
    outputs,
    all: config.output.map((o) => o.name),
  };
}

/**
 * Check one request's outputs, as a backend produced them, against the model's config: every
 * name is an output of the model and comes once, each datatype is the config's, each shape has
 * the config's dims (after the request's batch size when the model batches), each tensor's bytes
 * fit its shape, and every output the request asked for (every config output when it named none)
 * is there. Returns the first problem, naming the output, or undefined.
 */
export function checkOutputs(
  rules: OutputRules,
  request: InferenceRequest,
  outputs: readonly Tensor[],
): InferenceError | undefined {
  const model = rules.model;
  for (const [i, output] of outputs.entries()) {
    const rule = rules.outputs.get(output.name);
    if (!rule) return new InferenceError("OUTPUT_UNKNOWN", { output: output.name, model });
    for (let j = 0; j < i; j++) {
      if (outputs[j]?.name === output.name) {
        return new InferenceError("OUTPUT_DUPLICATE", { output: output.name, model });
      }
    }
    if (output.datatype !== rule.datatype) {
      return new InferenceError("OUTPUT_WRONG_DATATYPE", {
        got: output.datatype,
        output: output.name,
        expected: rule.datatype,
        model,
      });
    }
    if (rule.dims && !shapeFits(output.shape, rule.dims, rules.batching, batchOf(request, rules.batching))) {
      const batch = rules.batching ? [batchOf(request, true) ?? -1] : [];
      return new InferenceError("OUTPUT_WRONG_SHAPE", {
        output: output.name,
        expected: `[${[...batch, ...rule.dims].join(",")}]`,
        got: `[${output.shape.join(",")}]`,
      });
    }
    if (!sizeFits(output)) return new InferenceError("OUTPUT_SIZE_MISMATCH", { output: output.name });
  }
  const requested = request.outputs.length > 0 ? request.outputs.map((o) => o.name) : rules.all;
  for (const name of requested) {
    const rule = rules.outputs.get(name);
    if (rule?.dims && !outputs.some((o) => o.name === name)) {
      return new InferenceError("OUTPUT_MISSING", { output: name, model });
    }
  }
  return undefined;
}

/** The request's batch size (its first input's first dimension), when the model batches. */
function batchOf(request: InferenceRequest, batching: boolean): number | undefined {
  return batching ? request.inputs[0]?.shape[0] : undefined;
}

function shapeFits(shape: readonly number[], dims: readonly number[], batching: boolean, batch?: number): boolean {
  const offset = batching ? 1 : 0;
  if (shape.length !== dims.length + offset) return false;
  if (batching && batch !== undefined && shape[0] !== batch) return false;
  return dims.every((d, i) => d === -1 || shape[i + offset] === d);
}

function sizeFits(output: Tensor): boolean {
  const info = datatype(output.datatype);
  if (!info) return false;
  const count = elementCount(output.shape);
  if (info.byteSize === 0) return countBytesElements(output.data) === count;
  return (output.device ? output.device.byteSize : output.data.byteLength) === count * info.byteSize;
}
