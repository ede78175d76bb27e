import {
  BatchInput_Kind,
  BatchOutput_Kind,
  DataType,
  type ModelConfig,
  type ModelInput,
  ModelInput_Format,
  type ModelOutput,
} from "@galley/proto";
import type { Diagnostic } from "../diagnostic.js";
import { Platform } from "./platforms.js";

const INT64_MAX = 9223372036854775807n;

/**
 * Triton's `ValidateModelIOConfig` (PROTOCOL.md §4.3): every input, every output, then batch
 * inputs and outputs. As in Triton, each message ends with ` for <model>`.
 */
export function validateModelIOConfig(config: ModelConfig): Diagnostic[] {
  const out: Diagnostic[] = [];
  const add = (path: string, message: string) => out.push({ path, message: `${message} for ${config.name}` });
  const tensorRt = config.platform === Platform.tensorrtPlan;
  config.input.forEach((io, i) => {
    const path = `input[${i}]`;
    validateShape(io, config.maxBatchSize, "model input ", path, add);
    if ((io.format === ModelInput_Format.NHWC || io.format === ModelInput_Format.NCHW) && io.dims.length !== 3) {
      add(`${path}.format`, "model input NHWC/NCHW require 3 dims");
    }
    validateTensorRtOnly(io, tensorRt, "input", path, add);
  });
  config.output.forEach((io, i) => {
    const path = `output[${i}]`;
    validateShape(io, config.maxBatchSize, "model output ", path, add);
    validateTensorRtOnly(io, tensorRt, "output", path, add);
  });
  validateBatchIO(config, add);
  return out;
}

type Add = (path: string, message: string) => void;

function validateShape(io: ModelInput | ModelOutput, maxBatchSize: number, prefix: string, path: string, add: Add) {
  if (io.name === "") {
    add(`${path}.name`, `${prefix}must specify 'name'`);
    return;
  }
  const p = `${prefix}'${io.name}' `;
  if (io.dataType === DataType.TYPE_INVALID) {
    add(`${path}.data_type`, `${p}must specify 'data_type'`);
    return;
  }
  if (io.dims.length === 0) {
    add(`${path}.dims`, `${p}must specify 'dims'`);
    return;
  }
  const reshape = io.reshape?.shape;
  if (reshape && reshape.length === 0 && maxBatchSize === 0) {
    add(`${path}.reshape`, `${p}cannot have empty reshape for non-batching model as scalar tensors are not supported`);
    return;
  }
  if (io.dims.some((d) => d < 1n && d !== -1n)) {
    add(`${path}.dims`, `${p}dimension must be integer >= 1, or -1 to indicate a variable-size dimension`);
    return;
  }
  if (!reshape) return;
  if (reshape.some((d) => d < 1n && d !== -1n)) {
    add(`${path}.reshape`, `${p}reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension`);
    return;
  }
  const dimsCount = elementCount(io.dims);
  const reshapeCount = elementCount(reshape);
  for (const [count, what] of [
    [dimsCount, "dims"],
    [reshapeCount, "reshape"],
  ] as const) {
    if (count > INT64_MAX) {
      add(`${path}.${what}`, `element count for tensor '${io.name} ${what}' exceeds maximum size of ${INT64_MAX}`);
      return;
    }
  }
  // dims [1] may become a scalar (reshape []) when batching; the non-batching case failed above.
  if (dimsCount !== reshapeCount && !(reshapeCount === 0n && dimsCount === 1n)) {
    add(`${path}.reshape`, `${p}has different size for dims and reshape`);
    return;
  }
  if (dimsCount === -1n) {
    const a = segments(io.dims);
    const b = segments(reshape);
    if (a.length !== b.length) {
      add(`${path}.reshape`, `${p}has different number of variable-size dimensions for dims and reshape`);
    } else if (a.some((v, k) => v !== b[k])) {
      add(`${path}.reshape`, `${p}has different size for dims and reshape`);
    }
  }
}

function validateTensorRtOnly(
  io: ModelInput | ModelOutput,
  tensorRt: boolean,
  kind: "input" | "output",
  path: string,
  add: Add,
) {
  if (!tensorRt && io.isShapeTensor)
    add(`${path}.is_shape_tensor`, "shape tensors are only supported for TensorRT platform");
  if (io.isNonLinearFormatIo) {
    if (!tensorRt)
      add(`${path}.is_non_linear_format_io`, "Non-linear IO format is only supported for the TensorRT platform");
    else if (io.dims.length !== 3)
      add(`${path}.is_non_linear_format_io`, `Non-linear IO format ${kind} requires 3 dims`);
  }
}

function validateBatchIO(config: ModelConfig, add: Add) {
  const inputs = new Set(config.input.map((i) => i.name));
  const outputs = new Set(config.output.map((o) => o.name));
  config.batchInput.forEach((batchInput, i) => {
    const path = `batch_input[${i}]`;
    const kind = BatchInput_Kind[batchInput.kind] ?? String(batchInput.kind);
    if (BatchInput_Kind[batchInput.kind] === undefined) add(path, `unknown batch input kind '${kind}'`);
    else if (batchInput.sourceInput.length !== 1) {
      add(path, `batch input kind '${kind}' expects 1 source input, got ${batchInput.sourceInput.length}`);
    }
    if (batchInput.dataType !== DataType.TYPE_INT32 && batchInput.dataType !== DataType.TYPE_FP32) {
      add(`${path}.data_type`, "batch input data type must be TYPE_INT32 or TYPE_FP32");
    }
    for (const source of batchInput.sourceInput) {
      if (!inputs.has(source)) add(`${path}.source_input`, `unknown source input name '${source}'`);
    }
  });
  const targets = new Set<string>();
  config.batchOutput.forEach((batchOutput, i) => {
    const path = `batch_output[${i}]`;
    const kind = BatchOutput_Kind[batchOutput.kind] ?? String(batchOutput.kind);
    if (BatchOutput_Kind[batchOutput.kind] === undefined) add(path, `unknown batch output kind '${kind}'`);
    else if (batchOutput.sourceInput.length !== 1) {
      add(path, `batch output kind '${kind}' expects 1 source input, got ${batchOutput.sourceInput.length}`);
    }
    for (const source of batchOutput.sourceInput) {
      if (!inputs.has(source)) add(`${path}.source_input`, `unknown source input name '${source}'`);
    }
    for (const target of batchOutput.targetName) {
      if (!outputs.has(target)) add(`${path}.target_name`, `unknown target output name '${target}'`);
      else if (targets.has(target))
        add(`${path}.target_name`, `target output name '${target}' can only be specified once`);
      targets.add(target);
    }
  });
}

/** Triton's element count: -1 when any dim is variable, 0 for an empty shape, else the product. */
export function elementCount(dims: readonly bigint[]): bigint {
  if (dims.length === 0) return 0n;
  if (dims.includes(-1n)) return -1n;
  return dims.reduce((a, b) => a * b, 1n);
}

/** Products of the runs between -1s (an empty run counts 1). */
function segments(dims: readonly bigint[]): bigint[] {
  const out: bigint[] = [];
  let product = 1n;
  for (const d of dims) {
    if (d === -1n) {
      out.push(product);
      product = 1n;
    } else product *= d;
  }
  out.push(product);
  return out;
}
