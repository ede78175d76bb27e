/**
 * Triton model configuration for TypeScript: read and write `config.pbtxt`, and the datatype
 * vocabulary shared by configs and the protocol.
 *
 * @packageDocumentation
 */

export { dataTypeFromProtocol, dataTypeToProtocol, type ProtocolDataType } from "./data-type.js";
export { parseModelConfig, printModelConfig } from "./text-format.js";
