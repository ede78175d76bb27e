/**
 * Triton model configuration for TypeScript: read and write `config.pbtxt` and Triton's JSON
 * form, build configs with typed helpers, and the datatype vocabulary shared by configs and the
 * protocol.
 *
 * @packageDocumentation
 */

export {
  type BuiltModelConfig,
  ConfigBuildError,
  checkEnsembleGraph,
  type DataTypeName,
  dynamicBatching,
  type EnsembleStep,
  ensemble,
  input,
  instanceGroup,
  type ModelConfigInit,
  modelConfig,
  output,
  sequenceBatching,
  step,
} from "./builder.js";
export { dataTypeFromProtocol, dataTypeToProtocol, type ProtocolDataType } from "./data-type.js";
export { ConfigJsonError, fromModelConfigJson, printModelConfigJson, toModelConfigJson } from "./json-form.js";
export { ConfigParseError, parseModelConfig, printModelConfig } from "./text-format.js";
