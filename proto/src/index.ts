/**
 * The KServe v2 / Triton gRPC protocol (`inference.GRPCInferenceService`), the model
 * configuration schema (`inference.ModelConfig`, the vocabulary of `config.pbtxt`) and the gRPC
 * health protocol, as TypeScript messages and service descriptors for `@bufbuild/protobuf` v2
 * and Connect-RPC.
 *
 * Names and field numbers are identical to Triton's, so messages built here are read by Triton's
 * clients and servers unchanged. The code under `src/gen` is written by `buf generate` from the
 * `.proto` files in this package and is never edited by hand.
 *
 * Beside the generated code, a few hand-written modules shared by every Galley package: the
 * datatype table (`datatypes.ts`, also importable alone as `@galley/proto/datatypes`), the
 * mapping to the config's `DataType` enum (`config-datatype.ts`), the BYTES codec
 * (`bytes-codec.ts`, alone as `@galley/proto/bytes-codec`), `InferParameter` conversion
 * (`infer-parameters.ts`) and the ModelInfer codec (`model-infer-codec.ts`): messages written as
 * pieces that keep tensor bytes out of the encoded message, and the common messages read and
 * written in one pass, without reflection.
 *
 * Importing this package makes protobuf-es keep a leading U+FEFF in strings (see
 * `text-encoding.ts`); without it such a character is silently dropped.
 *
 * @packageDocumentation
 */

import "./text-encoding.js";

export {
  BytesCodecError,
  countBytesElements,
  decodeBytesElements,
  encodeBytesElements,
} from "./bytes-codec.js";
export { dataTypeFromProtocol, dataTypeToProtocol } from "./config-datatype.js";
export {
  ELEMENT_TYPES,
  type ElementType,
  elementType,
  type ProtocolDataType,
  type TypedArrayConstructor,
} from "./datatypes.js";
export * from "./gen/grpc/health/v1/health_pb.js";
export * from "./gen/inference/grpc_service_pb.js";
export * from "./gen/inference/model_config_pb.js";
export {
  fromInferParameter,
  fromInferParameters,
  type InferParameterValue,
  toInferParameter,
  toInferParameters,
} from "./infer-parameters.js";
export {
  decodeModelInferResponse,
  type EncodedPieces,
  encodeModelInferRequest,
  encodeModelInferResponse,
  encodeModelStreamInferResponse,
  fieldPrefix,
  type LeanHead,
  type LeanInferRequest,
  type LeanTensor,
  RAW_INPUT_CONTENTS_TAG,
  RAW_OUTPUT_CONTENTS_TAG,
  readModelInferRequest,
  readModelInferResponse,
  withRawContents,
  writeModelInferRequestHead,
  writeModelInferResponseHead,
} from "./model-infer-codec.js";
