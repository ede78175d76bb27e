import { constants } from "node:buffer";
import { randomFillSync } from "node:crypto";
import { dimsString } from "@galley/config";
import { DataType, type ModelConfig, type ModelWarmup, type ModelWarmup_Input } from "@galley/proto";
import type { BackendInstance } from "../backend/backend.js";
import { datatypeOf } from "../base/datatype.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Tensor } from "../base/tensor.js";
import { validateRequest } from "../base/validate-request.js";
import type { BatchMemory } from "../scheduler/batch-memory.js";
import { readModelFile } from "./model-file.js";
import type { WorkingMemoryProbe } from "./working-memory.js";

/** Where the warm-up samples' working memory goes, by batch size. */
export interface WarmupMemory {
  /** GPU working memory: the backend's own figure (PyTorch's allocator), else the probe's (a stub's NVML figure). */
  gpu: BatchMemory;
  /** Host working memory: the probe's (peak resident set during the sample). */
  host?: BatchMemory;
  /** Measures what the backend does not report itself. */
  probe?: WorkingMemoryProbe;
}

/** The largest input a sample may have: the largest buffer Node allocates (Triton's limit is INT64_MAX). */
export const MAX_WARMUP_INPUT_BYTES = constants.MAX_LENGTH;
const INT64_MAX = 2n ** 63n - 1n;
/** Triton's `LogRequest()` of a warm-up request, which has no id. */
const LOG_REQUEST = "[request id: <id_unknown>] ";

/**
 * Run the config's `model_warmup` samples on every instance before the model is READY, as
 * Triton does: each sample is `batch_size` requests of batch 1 sent together, `count` times
 * (at least once), with zero, random or file data (`<model>/warmup/<file>`). A sample that
 * fails fails the load with Triton's `failed to run warmup sample '<name>': <error>; `. Each
 * sample's working memory goes into `memory`: on a GPU, GPU-memory admission's first figures; on
 * the host, the peak resident set the sample took (see `WorkingMemoryProbe`).
 */
export async function warmUp(
  config: ModelConfig,
  instances: readonly BackendInstance[],
  modelPath: string,
  memory?: WarmupMemory,
): Promise<void> {
  for (const sample of config.modelWarmup) {
    if (sample.batchSize === 0) continue;
    const requests = await warmupRequests(config, sample, modelPath);
    for (let round = 0; round < Math.max(1, sample.count); round++) {
      for (const instance of instances) {
        const measured = await memory?.probe?.begin(instance);
        const result = await instance.execute(requests);
        const taken = await measured?.();
        const gpu = result.peakWorkingBytes ?? taken?.gpu;
        if (gpu !== undefined) memory?.gpu.record(sample.batchSize, gpu);
        if (taken?.host !== undefined) memory?.host?.record(sample.batchSize, taken.host);
        const failure = result.responses.find((r): r is Error => r instanceof Error);
        if (failure) throw new Error(`failed to run warmup sample '${sample.name}': ${failure.message}; `);
      }
    }
  }
}

/**
 * One sample's `batch_size` requests, checked as Triton's core checks them before they run
 * (`GenerateWarmupData`, then `PrepareForInference`, which normalizes each request against the
 * config): inputs that are the model's are checked as a client's request is; the others (a
 * sequence's control inputs) are added as they are, as Triton adds override inputs.
 *
 * @throws Error with Triton's message.
 */
async function warmupRequests(
  config: ModelConfig,
  sample: ModelWarmup,
  modelPath: string,
): Promise<InferenceRequest[]> {
  const inputs: Tensor[] = [];
  for (const [name, input] of Object.entries(sample.inputs)) {
    inputs.push(await warmupInput(config, name, input, modelPath));
  }
  const request: InferenceRequest = {
    modelName: config.name,
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: inputs.filter((tensor) => isModelInput(config, tensor.name)),
    outputs: [],
  };
  validateRequest(request, config);
  request.inputs = inputs;
  // Galley's schedulers never give an instance more; Triton's backends refuse such a batch thus.
  if (sample.batchSize > Math.max(1, config.maxBatchSize)) {
    throw new Error(
      `failed to run warmup sample '${sample.name}': batch size ${sample.batchSize} for '${config.name}', max allowed is ${config.maxBatchSize}; `,
    );
  }
  return Array.from({ length: sample.batchSize }, () => ({ ...request }));
}

function isModelInput(config: ModelConfig, name: string): boolean {
  return config.input.some((i) => i.name === name);
}

/** One input of a sample, with its data. @throws Error with Triton's message. */
async function warmupInput(config: ModelConfig, name: string, input: ModelWarmup_Input, modelPath: string) {
  const info = datatypeOf(input.dataType);
  if (!info) throw new Error(`warmup setting has no data type for input '${name}'`);
  const isString = input.dataType === DataType.TYPE_STRING;
  const size = byteSize(name, input.dims, isString ? 4 : info.byteSize, isString);
  const dims = input.dims.map(Number);
  const shape = config.maxBatchSize > 0 && isModelInput(config, name) ? [1, ...dims] : dims;
  const tensor = (data: Uint8Array): Tensor => ({ name, datatype: info.name, shape, data, parameters: {} });
  const source = input.inputDataType;
  switch (source.case) {
    case "zeroData":
      return tensor(new Uint8Array(size));
    case "randomData": {
      // BYTES get zeros, as in Triton: each element is then an empty string.
      const data = new Uint8Array(size);
      if (isString) return tensor(data);
      randomFillSync(data);
      if (input.dataType === DataType.TYPE_BOOL) for (let i = 0; i < data.length; i++) data[i] = (data[i] ?? 0) & 1;
      return tensor(data);
    }
    case "inputDataFile": {
      const bytes = await readModelFile(modelPath, "warmup", source.value, "warmup input_data_file");
      if (isString) return tensor(bytes);
      if (bytes.byteLength < size) {
        throw new Error(
          `${LOG_REQUEST}warmup setting expects ${size} bytes, but the data provided from ${source.value}only has ${bytes.byteLength} bytes`,
        );
      }
      return tensor(bytes.subarray(0, size));
    }
    default:
      throw new Error(`${LOG_REQUEST}warmup setting expects input '${name}' to have input_data_type set`);
  }
}

/**
 * The input's byte size (BYTES: 4 bytes per element, the length of an empty string), with
 * Triton's messages (`GetByteSize`) for a variable, invalid or overflowing dimension.
 */
function byteSize(name: string, dims: readonly bigint[], elementBytes: number, isString: boolean): number {
  let count = 1n;
  let overflow = false;
  for (const d of dims) {
    if (d === -1n) {
      throw new Error(`warmup setting expects all variable-size dimensions are specified for input '${name}'`);
    }
    if (d < 0n) {
      const where = isString ? "in shape " : "";
      throw new Error(`tensor '${name}' contains an invalid dimension ${where}${dimsString(dims)}`);
    }
    count *= d;
    if (count > INT64_MAX) overflow = true;
  }
  if (overflow && isString) throw new Error(`element count for tensor '${name}' exceeds maximum size of ${INT64_MAX}`);
  const bytes = count * BigInt(elementBytes);
  if (overflow || bytes > INT64_MAX) {
    throw new Error(`byte size for tensor '${name}' exceeds maximum size of ${INT64_MAX}`);
  }
  if (bytes > BigInt(MAX_WARMUP_INPUT_BYTES)) {
    throw new Error(
      `warmup setting for input '${name}' needs ${bytes} bytes, more than the ${MAX_WARMUP_INPUT_BYTES} bytes an input can have`,
    );
  }
  return Number(bytes);
}
