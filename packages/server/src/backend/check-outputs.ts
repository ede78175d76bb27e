import { dataTypeToProtocol } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import { countBytesElements } from "@galley/proto";
import { datatype } from "../base/datatype.js";
import { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { elementCount, type Tensor } from "../base/tensor.js";

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
