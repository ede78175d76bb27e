import { fromBinary } from "@bufbuild/protobuf";
import {
  type EncodedPieces,
  encodeBytesElements,
  encodeModelInferResponse,
  type InferParameter,
  type InferTensorContents,
  type ModelInferRequest,
  ModelInferRequestSchema,
  type ModelInferResponse,
  RAW_OUTPUT_CONTENTS_TAG,
  readModelInferRequest,
  toInferParameters,
  withRawContents,
  writeModelInferResponseHead,
} from "@galley/proto";
import { datatype } from "../../base/datatype.js";
import { InferenceError } from "../../base/errors.js";
import type { InferenceRequest, InferenceResponse } from "../../base/inference-request.js";
import type { Parameters, Tensor } from "../../base/tensor.js";
import type { SharedMemoryRef } from "../../core/shared-memory.js";
import { describeWireFault, findWireFault } from "./wire-fault.js";

/** Which typed-contents field carries each datatype (PROTOCOL.md §2.2), and the type it implies. */
const CONTENTS: Record<string, [keyof Omit<InferTensorContents, "$typeName">, string]> = {
  BOOL: ["boolContents", "BOOL"],
  INT8: ["intContents", "INT32"],
  INT16: ["intContents", "INT32"],
  INT32: ["intContents", "INT32"],
  INT64: ["int64Contents", "INT64"],
  UINT8: ["uintContents", "UINT32"],
  UINT16: ["uintContents", "UINT32"],
  UINT32: ["uintContents", "UINT32"],
  UINT64: ["uint64Contents", "UINT64"],
  FP32: ["fp32Contents", "FP32"],
  FP64: ["fp64Contents", "FP64"],
  BYTES: ["bytesContents", "BYTES"],
};

const FIELD_TYPE: Record<string, string> = {
  boolContents: "BOOL",
  intContents: "INT32",
  int64Contents: "INT64",
  uintContents: "UINT32",
  uint64Contents: "UINT64",
  fp32Contents: "FP32",
  fp64Contents: "FP64",
  bytesContents: "BYTES",
};

/**
 * Decode a `ModelInferRequest` from its wire bytes (`raw_input_contents` stay views of them).
 *
 * @throws {@link InferenceError} GRPC_BAD_MESSAGE naming the field where the bytes break, never
 * the decoder's own JavaScript error.
 */
export function decodeModelInfer(bytes: Uint8Array): ModelInferRequest {
  try {
    return fromBinary(ModelInferRequestSchema, bytes);
  } catch (error) {
    const detail = describeWireFault(findWireFault(ModelInferRequestSchema, bytes));
    throw new InferenceError("GRPC_BAD_MESSAGE", { message: "ModelInferRequest", detail }, { cause: error });
  }
}

/**
 * A `ModelInferRequest`'s bytes as a core request in one pass, for the shape nearly every client
 * sends (@galley/proto's `readModelInferRequest`: 0.8 µs for `simple`'s against 5.4 for
 * {@link decodeModelInfer} and {@link requestFromGrpc}, `bench/grpc-codec.ts`); undefined for any
 * other, which those two answer with their errors. `grpc-codec.fuzz.test.ts` holds both to the
 * same request.
 */
export function leanRequestFromGrpc(bytes: Uint8Array, signal?: AbortSignal): InferenceRequest | undefined {
  const lean = readModelInferRequest(bytes);
  if (!lean) return undefined;
  const request: InferenceRequest = {
    modelName: lean.modelName,
    modelVersion: lean.modelVersion,
    id: lean.id,
    parameters: {},
    inputs: lean.inputs.map((i) => ({ ...i, datatype: i.datatype as Tensor["datatype"], parameters: {} })),
    outputs: lean.outputs.map((name) => ({ name, parameters: {} })),
  };
  if (signal) request.signal = signal;
  return request;
}

/**
 * A `ModelInferRequest` as a core request. Raw contents are used as they are (views of the
 * received message); typed contents are packed into little-endian bytes.
 */
export function requestFromGrpc(message: ModelInferRequest, signal?: AbortSignal): InferenceRequest {
  const model = message.modelName;
  const raw = message.rawInputContents;
  // Triton's order, input by input: shared memory, then typed contents, then the next raw
  // buffer. Raw buffers go to the inputs that have neither, in order.
  let nextRaw = 0;
  const inputs: Tensor[] = message.inputs.map((input) => {
    const contents = input.contents;
    const tensor = {
      name: input.name,
      datatype: input.datatype as Tensor["datatype"],
      shape: input.shape.map(Number),
    };
    const sharedMemory = sharedMemoryRef(input.name, input.parameters);
    if (sharedMemory) {
      if (contents) throw new InferenceError("CONTENTS_WITH_SHM", { input: input.name, model });
      parameters(input.parameters, false); // its other parameters checked as any tensor's, then dropped
      return { ...tensor, data: new Uint8Array(0), parameters: {}, sharedMemory };
    }
    let data: Uint8Array;
    if (contents) {
      // A contents message counts even when empty, as `has_contents()` does for Triton: with raw
      // buffers it is refused, alone it is zero bytes of data (the core then checks the size).
      if (raw.length > 0) throw new InferenceError("CONTENTS_WITH_RAW", { input: input.name, model });
      const used = usedFields(contents);
      data = used.length === 0 ? new Uint8Array(0) : packContents(input.name, model, input.datatype, contents, used);
    } else if (nextRaw < raw.length) {
      data = raw[nextRaw++] as Uint8Array;
    } else {
      throw new InferenceError("NO_INPUT_DATA", { input: input.name, model });
    }
    return { ...tensor, data, parameters: parameters(input.parameters, false) };
  });
  // Triton ignores raw buffers no input takes; Galley refuses them, as they can only be a client's mistake.
  if (nextRaw < raw.length) {
    throw new InferenceError("RAW_CONTENTS_COUNT", { expected: nextRaw, got: raw.length, model });
  }
  return {
    modelName: message.modelName,
    modelVersion: message.modelVersion,
    id: message.id,
    parameters: parameters(message.parameters, true),
    inputs,
    outputs: message.outputs.map((o) => {
      sharedMemoryRef(o.name, o.parameters);
      return { name: o.name, parameters: parameters(o.parameters, false) };
    }),
    ...(signal ? { signal } : {}),
  };
}

/** A core response as `ModelInferResponse`, always with `raw_output_contents` (as Triton answers). */
export function responseToGrpc(response: InferenceResponse): ModelInferResponse {
  // Every field spelled out, as `create` would fill them, without its reflection (a stream writes
  // one of these per response): grpc-codec.test.ts holds it equal to `create`'s message.
  return {
    $typeName: "inference.ModelInferResponse",
    modelName: response.modelName,
    modelVersion: response.modelVersion,
    id: response.id,
    // A response's parameters (an ensemble's `sequence_*`, a model's own).
    parameters: toInferParameters(response.parameters),
    outputs: response.outputs.map((o) => ({
      $typeName: "inference.ModelInferResponse.InferOutputTensor",
      name: o.name,
      datatype: o.datatype,
      shape: o.shape.map(BigInt),
      parameters: {},
    })),
    rawOutputContents: response.outputs.map((o) => o.data),
  };
}

/**
 * A core response as the pieces of its `ModelInferResponse`: the head (written in one pass when the
 * response has no parameters, byte-equal to protobuf-es and a tenth of its CPU: 0.6 against 7.5 µs
 * for `simple`'s on Node 26, `bench/grpc-codec.ts`), then each output's bytes as they are (not
 * copied). A response with parameters goes through {@link responseToGrpc} and `toBinary`.
 */
export function responsePieces(response: InferenceResponse): EncodedPieces {
  const head = writeModelInferResponseHead(response, response.outputs);
  if (!head) return encodeModelInferResponse(responseToGrpc(response));
  return withRawContents(
    head,
    RAW_OUTPUT_CONTENTS_TAG,
    response.outputs.map((o) => o.data),
  );
}

function usedFields(contents: InferTensorContents): string[] {
  return Object.keys(FIELD_TYPE).filter((k) => (contents[k as keyof InferTensorContents] as unknown[]).length > 0);
}

function packContents(
  name: string,
  model: string,
  type: string,
  contents: InferTensorContents,
  used: string[],
): Uint8Array {
  const expected = CONTENTS[type];
  const field = used[0] as string;
  if (!expected || used.length > 1 || expected[0] !== field) {
    throw new InferenceError("WRONG_CONTENTS", { input: name, model, got: FIELD_TYPE[field] ?? field, expected: type });
  }
  const values = contents[field as keyof Omit<InferTensorContents, "$typeName">] as unknown[];
  if (type === "BYTES") return encodeBytesElements(values as Uint8Array[]);
  const info = datatype(type);
  const ArrayType = info?.array;
  if (!ArrayType) throw new InferenceError("WRONG_CONTENTS", { input: name, model, got: field, expected: type });
  if (type === "BOOL") return Uint8Array.from(values as boolean[], (v) => (v ? 1 : 0));
  // Typed arrays narrow INT8/INT16/UINT8/UINT16 values held in 32-bit fields, as Triton does.
  const typed =
    ArrayType === BigInt64Array || ArrayType === BigUint64Array
      ? new ArrayType(values as bigint[])
      : new (ArrayType as Float64ArrayConstructor)(values as number[]);
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

/**
 * gRPC parameters as core parameters, with Triton's rules (PROTOCOL.md §1.4, §2.4): reserved
 * `triton_` keys rejected, `sequence_id` as int64 or string, `priority` as int64 or uint64,
 * `timeout` as int64, and no uint64 for other keys.
 */
function parameters(map: { [key: string]: InferParameter }, request: boolean): Parameters {
  const out: Parameters = {};
  for (const [key, parameter] of Object.entries(map)) {
    const choice = parameter.parameterChoice;
    if (choice.case === undefined) continue;
    if (request && key.startsWith("triton_") && key !== "triton_enable_empty_final_response") {
      throw new InferenceError("RESERVED_PARAMETER");
    }
    if (request) checkReserved(key, choice.case);
    else if (choice.case === "uint64Param" && key !== "classification") {
      throw new InferenceError("BAD_PARAMETER", { message: `unsupported parameter type for '${key}': uint64_param` });
    }
    out[key] = choice.value;
  }
  return out;
}

/**
 * A tensor's `shared_memory_*` parameters as Triton's `ParseSharedMemoryParams` reads them, with its
 * errors: the region a string, the offset and byte size int64, neither without a region, and the
 * byte size required with one. Undefined when the tensor names no region.
 */
function sharedMemoryRef(tensor: string, map: { [key: string]: InferParameter }): SharedMemoryRef | undefined {
  const typed = (parameter: string, value: InferParameter | undefined, kind: "stringParam" | "int64Param") => {
    if (value === undefined || value.parameterChoice.case === kind) return value?.parameterChoice.value;
    const expected = kind === "stringParam" ? "string_param" : "int64_param";
    throw new InferenceError("SHM_PARAMETER_TYPE", { parameter, tensor, expected });
  };
  const region = map.shared_memory_region;
  const name = typed("shared_memory_region", region, "stringParam");
  for (const parameter of ["shared_memory_offset", "shared_memory_byte_size"]) {
    if (region === undefined && map[parameter] !== undefined) {
      throw new InferenceError("SHM_PARAMETER_WITHOUT_REGION", { parameter, tensor });
    }
  }
  if (region === undefined) return undefined;
  const offset = typed("shared_memory_offset", map.shared_memory_offset, "int64Param");
  const byteSize = typed("shared_memory_byte_size", map.shared_memory_byte_size, "int64Param");
  if (byteSize === undefined) throw new InferenceError("SHM_BYTE_SIZE_REQUIRED", { tensor });
  return { region: name as string, offset: Number(offset ?? 0), byteSize: Number(byteSize) };
}

function checkReserved(key: string, kind: InferParameter["parameterChoice"]["case"]): void {
  const allowed: Record<string, string[]> = {
    sequence_id: ["int64Param", "stringParam"],
    sequence_start: ["boolParam"],
    sequence_end: ["boolParam"],
    priority: ["int64Param", "uint64Param"],
    timeout: ["int64Param"],
  };
  const kinds = allowed[key];
  if (kinds && !kinds.includes(kind as string)) {
    throw new InferenceError("PARAMETER_VALUE_TYPE", { name: key });
  }
  if (!kinds && kind === "uint64Param") {
    throw new InferenceError("BAD_PARAMETER", { message: `unsupported parameter type for '${key}': uint64_param` });
  }
}
