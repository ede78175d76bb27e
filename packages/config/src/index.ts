/**
 * Triton model configuration for TypeScript: read and write `config.pbtxt` and Triton's JSON
 * form, build configs with typed helpers, and load them exactly as Triton does — autofill,
 * normalisation, validation with Triton's messages, ONNX auto-complete, ensembles — plus the
 * `galley config` command.
 *
 * @packageDocumentation
 */

// The datatype vocabulary, shared with the server and client through @galley/proto
export { dataTypeFromProtocol, dataTypeToProtocol, type ProtocolDataType } from "@galley/proto";
// Building
export {
  type BuiltModelConfig,
  ConfigBuildError,
  checkEnsembleGraph,
  type DataTypeName,
  type DynamicBatchingInit,
  dynamicBatching,
  type EnsembleStep,
  ensemble,
  type InitShape,
  input,
  instanceGroup,
  type ModelConfigInit,
  modelConfig,
  output,
  type SequenceBatchingInit,
  sequenceBatching,
  step,
} from "./builder.js";
// The command line
export type { CommandIO } from "./cli/command-io.js";
export { type ConfigCommandContext, runConfigCommand } from "./cli/config-command.js";
export type { ValidateContext } from "./cli/validate-command.js";
// Loading as Triton does
export type { Diagnostic } from "./diagnostic.js";
// The backends a Galley server has
export {
  GALLEY_BACKEND_NAMES,
  GALLEY_BACKENDS,
  GALLEY_PYTHON_BASED_BACKENDS,
  type GalleyBackend,
} from "./galley-backends.js";
export { ConfigJsonError, fromModelConfigJson, printModelConfigJson, toModelConfigJson } from "./json-form.js";
export {
  type CheckOptions,
  checkModel,
  checkRepository,
  type ModelCheck,
  type ModelSource,
  PYTHON_BASED_RUNTIME,
  versionsToLoad,
} from "./model-check.js";
export { type AutoCompleteResult, autoCompleteOnnx, type OnnxAutoCompleteOptions } from "./onnx-auto-complete.js";
export {
  findOnnxModelFile,
  type ModelIO,
  type ModelTensorInfo,
  missingOnnxModelMessage,
  OnnxModelError,
  readOnnxModelIO,
} from "./onnx-io.js";
export { isModelFolder, type ReadOptions, readModelSource, readRepository } from "./repository-reader.js";
export { autofillBackendFields, type VersionEntry } from "./rules/autofill.js";
export { dimsString, type EnsembleCheck, validateEnsembleConfig } from "./rules/ensemble-config.js";
export { validateEnsembleScheduling } from "./rules/ensemble-graph.js";
export {
  type InstanceGroupOptions,
  normalizeInstanceGroups,
  normalizeModelConfig,
  SEQUENCE_IDLE_DEFAULT_MICROSECONDS,
} from "./rules/normalize.js";
export { Backend, Platform } from "./rules/platforms.js";
export { type InstanceGroupCheckOptions, validateInstanceGroups } from "./rules/validate-instance-groups.js";
export { elementCount, validateModelIOConfig } from "./rules/validate-io.js";
export { validateModelConfig } from "./rules/validate-model-config.js";
// Reading and writing
export { ConfigParseError, parseModelConfig, printModelConfig } from "./text-format.js";
