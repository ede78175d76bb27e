import { clone, create } from "@bufbuild/protobuf";
import {
  type ModelConfig,
  ModelConfigSchema,
  ModelDynamicBatchingSchema,
  ModelInputSchema,
  ModelOutputSchema,
  ModelTensorReshapeSchema,
} from "@galley/proto";
import type { Diagnostic } from "./diagnostic.js";
import type { ModelIO, ModelTensorInfo } from "./onnx-io.js";

/** Options for {@link autoCompleteOnnx}. */
export interface OnnxAutoCompleteOptions {
  /** `--backend-config=onnxruntime,default-max-batch-size=N`; Triton's default is 4. */
  defaultMaxBatchSize?: number;
}

/** What {@link autoCompleteOnnx} produced: the completed config, or why it could not. */
export interface AutoCompleteResult {
  config: ModelConfig;
  diagnostics: Diagnostic[];
  /** What was filled in, for a verbose log line. */
  notes: string[];
}

/**
 * Complete a config from the model's own inputs and outputs, as Triton's ONNX Runtime backend
 * does (PROTOCOL.md §4.5). A pure function: the caller reads the model (see `readOnnxModelIO`).
 *
 * - Skipped when the config lists both inputs and outputs.
 * - Batching is supported when every model input and output has a variable first dimension.
 *   Then `max_batch_size` 0 becomes the default (4), and an empty `dynamic_batching` is added when
 *   it is above 1 and no scheduler is configured. A non-zero `max_batch_size` for a model that
 *   cannot batch is an error.
 * - Missing `input` / `output` lists are filled with names, datatypes and dims (the batch
 *   dimension dropped when batching), in name order as Triton lists them; a scalar becomes
 *   `dims: [1]`, with `reshape: { shape: [] }` when batching.
 */
export function autoCompleteOnnx(
  config: ModelConfig,
  io: ModelIO,
  options: OnnxAutoCompleteOptions = {},
): AutoCompleteResult {
  const result = clone(ModelConfigSchema, config);
  const notes: string[] = [];
  if (result.input.length > 0 && result.output.length > 0) {
    notes.push(`skipping model configuration auto-complete for '${config.name}': inputs and outputs already specified`);
    return { config: result, diagnostics: [], notes };
  }

  const tensors = [...io.inputs, ...io.outputs];
  const canBatch = tensors.length > 0 && tensors.every((t) => t.dims.length > 0 && t.dims[0] === -1n);
  if (canBatch) {
    if (result.maxBatchSize === 0) {
      result.maxBatchSize = options.defaultMaxBatchSize ?? 4;
      notes.push(`autofilled max_batch_size to ${result.maxBatchSize} for model '${config.name}'`);
    }
    if (result.maxBatchSize > 1 && result.schedulingChoice.case === undefined) {
      result.schedulingChoice = { case: "dynamicBatching", value: create(ModelDynamicBatchingSchema) };
      notes.push(`autofilled dynamic_batching for model '${config.name}'`);
    }
  } else if (result.maxBatchSize > 0) {
    return {
      config: result,
      diagnostics: [
        {
          path: "max_batch_size",
          message: `autofill failed for model '${config.name}': model does not support batching while non-zero max_batch_size is specified`,
        },
      ],
      notes,
    };
  }

  const batching = result.maxBatchSize > 0;
  if (result.input.length === 0) {
    result.input = byName(io.inputs).map((t) =>
      create(ModelInputSchema, { name: t.name, dataType: t.dataType, ...shape(t, batching) }),
    );
  }
  if (result.output.length === 0) {
    result.output = byName(io.outputs).map((t) =>
      create(ModelOutputSchema, { name: t.name, dataType: t.dataType, ...shape(t, batching) }),
    );
  }
  return { config: result, diagnostics: [], notes };
}

/** Triton lists auto-completed tensors in name order (it reads them into a std::map). */
function byName(tensors: readonly ModelTensorInfo[]): ModelTensorInfo[] {
  return [...tensors].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

function shape(tensor: ModelTensorInfo, batching: boolean) {
  const dims = batching ? tensor.dims.slice(1) : [...tensor.dims];
  if (dims.length > 0) return { dims };
  return batching ? { dims: [1n], reshape: create(ModelTensorReshapeSchema, { shape: [] }) } : { dims: [1n] };
}
