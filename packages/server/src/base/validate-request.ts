import { dataTypeToProtocol, dimsString } from "@galley/config";
import type { ModelConfig, ModelInput } from "@galley/proto";
import { countBytesElements } from "@galley/proto";
import { datatype } from "./datatype.js";
import { InferenceError, requestId } from "./errors.js";
import type { InferenceRequest } from "./inference-request.js";
import { elementCount } from "./tensor.js";

const BATCH_NOTE =
  "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.";

/**
 * Check a request against the model's config, as Triton's core does before scheduling: known
 * inputs and outputs each named once, every required input present, datatypes, shapes (with the batch
 * dimension when batching), byte sizes, and the batch size limit. Returns the batch size.
 *
 * @throws {@link InferenceError} with Triton's message.
 */
export function validateRequest(request: InferenceRequest, config: ModelConfig): number {
  const id = requestId(request.id);
  const model = config.name;
  const { declared, outputs, required } = shapeOf(config);
  const seen = new Set<string>();
  for (const input of request.inputs) {
    if (!declared.has(input.name)) throw new InferenceError("UNEXPECTED_INPUT", { id, input: input.name, model });
    if (seen.has(input.name)) throw new InferenceError("DUPLICATE_INPUT", { id, input: input.name });
    seen.add(input.name);
  }
  // Triton refuses a repeated output where the frontend adds it to the request, as it does a
  // repeated input, so before any check against the model's config.
  const named = new Set<string>();
  for (const output of request.outputs) {
    if (named.has(output.name)) throw new InferenceError("DUPLICATE_OUTPUT", { id, output: output.name });
    named.add(output.name);
  }
  const missing = required.filter((name) => !seen.has(name));
  if (missing.length > 0) {
    throw new InferenceError("MISSING_INPUTS", {
      id,
      expected: required.length,
      got: request.inputs.length,
      model,
      given: list(request.inputs.map((i) => i.name)),
      missing: list(missing),
    });
  }
  for (const output of request.outputs) {
    if (!outputs.has(output.name)) throw new InferenceError("UNEXPECTED_OUTPUT", { id, output: output.name, model });
  }

  const batching = config.maxBatchSize > 0;
  let batchSize = batching ? -1 : 1;
  for (const input of request.inputs) {
    const { expectedType, dims, expected } = declared.get(input.name) as DeclaredInput;
    const info = datatype(input.datatype);
    if (!info) throw new InferenceError("UNKNOWN_DATATYPE", { id, datatype: input.datatype, input: input.name });
    if (info.name !== expectedType) {
      throw new InferenceError("WRONG_DATATYPE", {
        id,
        input: input.name,
        got: input.datatype,
        model,
        expected: expectedType,
      });
    }
    if (!shapeMatches(input.shape, expected) || input.shape.some((d) => d < 0)) {
      throw new InferenceError("UNEXPECTED_SHAPE", {
        id,
        input: input.name,
        model,
        expected: dimsString(expected.map(BigInt)),
        got: dimsString(input.shape.map(BigInt)),
        note: batching && input.shape.length === dims.length ? ` ${BATCH_NOTE}` : "",
      });
    }
    if (batching) {
      const size = input.shape[0] ?? 0;
      if (batchSize === -1) batchSize = size;
      else if (size !== batchSize) throw new InferenceError("BATCH_MISMATCH", { id, input: input.name, model });
    }
    const count = elementCount(input.shape);
    if (info.byteSize > 0) {
      // A tensor on a GPU (a CUDA region read in place, a kept output) has no host bytes here.
      const bytes = input.device ? input.device.byteSize : input.data.byteLength;
      if (bytes !== count * info.byteSize) {
        throw new InferenceError("BYTE_SIZE_MISMATCH", {
          id,
          input: input.name,
          model,
          expected: count * info.byteSize,
          got: bytes,
        });
      }
    } else {
      const elements = countBytesElements(input.data);
      if (elements < 0) throw new InferenceError("BAD_BYTES_INPUT", { id, input: input.name, model });
      if (elements !== count) {
        throw new InferenceError("BYTES_COUNT_MISMATCH", {
          id,
          expected: count,
          input: input.name,
          model,
          got: elements,
        });
      }
    }
  }
  if (batching) {
    if (batchSize === -1) batchSize = 1;
    if (batchSize > config.maxBatchSize) {
      throw new InferenceError("BATCH_TOO_LARGE", { id, max: config.maxBatchSize, model });
    }
  }
  return batchSize;
}

interface DeclaredInput {
  expectedType: string;
  /** The config's dims, and the shape a request must have (with the batch dimension when batching). */
  dims: readonly number[];
  expected: readonly number[];
}

interface ConfigShape {
  declared: ReadonlyMap<string, DeclaredInput>;
  outputs: ReadonlySet<string>;
  /** The names of the inputs that are not optional, in config order. */
  required: readonly string[];
}

/** What every request is checked against, worked out once per loaded config. */
const shapes = new WeakMap<ModelConfig, ConfigShape>();

function shapeOf(config: ModelConfig): ConfigShape {
  let shape = shapes.get(config);
  if (!shape) {
    const batching = config.maxBatchSize > 0;
    const declare = (input: ModelInput): DeclaredInput => {
      const dims = input.dims.map(Number);
      return { expectedType: dataTypeToProtocol(input.dataType), dims, expected: batching ? [-1, ...dims] : dims };
    };
    shape = {
      declared: new Map(config.input.map((i) => [i.name, declare(i)])),
      outputs: new Set(config.output.map((o) => o.name)),
      required: config.input.filter((i) => !i.optional).map((i) => i.name),
    };
    shapes.set(config, shape);
  }
  return shape;
}

function shapeMatches(shape: readonly number[], expected: readonly number[]): boolean {
  return shape.length === expected.length && shape.every((d, i) => expected[i] === -1 || expected[i] === d);
}

/** Python-list style, as Triton prints names: `['INPUT0', 'INPUT1']`. */
function list(names: readonly string[]): string {
  return `[${names.map((n) => `'${n}'`).join(", ")}]`;
}
