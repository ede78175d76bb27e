import { dataTypeToProtocol, dimsString, type ProtocolDataType } from "@galley/config";
import { datatype } from "../../base/datatype.js";
import { InferenceError } from "../../base/errors.js";
import type { InferenceRequest, RequestedOutput } from "../../base/inference-request.js";
import type { Parameters, Tensor } from "../../base/tensor.js";
import type { ModelView } from "../../core/inference-server.js";
import type { SharedMemoryRef } from "../../core/shared-memory.js";
import type { Body } from "../transport/http-exchange.js";
import {
  asArray,
  asBool,
  asDataArray,
  asString,
  asUint,
  field,
  internal,
  member,
  members,
  parseBody,
  required,
} from "./json-access.js";
import { JsonFloat, type JsonObject, type JsonValue } from "./json-parse.js";
import { jsonElementCount, tensorFromJson } from "./json-tensor.js";

/** How each output is returned: binary (after the JSON header) or as JSON `data`. */
export interface OutputPlan {
  /** Outputs listed in the request: binary only with their own `binary_data: true`. */
  listed: Map<string, boolean>;
  /** Outputs not listed (all of them when `outputs` is absent): `binary_data_output`. */
  binaryByDefault: boolean;
}

/** A decoded REST inference request. */
export interface DecodedInfer {
  request: InferenceRequest;
  plan: OutputPlan;
}

/** C's `atoi`, as Triton reads `Inference-Header-Content-Length`: garbage reads as 0. */
export function atoi(text: string): number {
  const match = /^[ \t\n\v\f\r]*([+-]?\d+)/.exec(text);
  return match ? Number(match[1]) : 0;
}

/**
 * Decode an inference body (PROTOCOL.md §1.3–1.6): the JSON header (`Inference-Header-Content-
 * Length` bytes, or the whole body without that header), then each binary input's bytes in
 * input order. Binary inputs are views of the body buffer, never copies; JSON inputs get
 * buffers of their own. A header length of 0 is a raw request for a single-input model.
 *
 * @throws {@link InferenceError} with Triton's texts and codes, in Triton's order.
 */
export function decodeInfer(
  body: Body,
  headerValue: string | undefined,
  model: ModelView,
  modelName: string,
  modelVersion: string,
  maxInputSize = Number.POSITIVE_INFINITY,
): DecodedInfer {
  const size = body.bytes.byteLength;
  const headerLength = headerValue === undefined ? size : atoi(headerValue);
  if (headerLength < 0 || headerLength > size) {
    throw new InferenceError("HEADER_LENGTH_RANGE", { size, got: headerValue ?? "" });
  }
  // --http-max-input-size, as Triton applies it: the raw input, the JSON header (not the binary data after it).
  if (headerLength === 0) {
    if (size > maxInputSize) throw new InferenceError("RAW_INPUT_TOO_LARGE", { size, limit: maxInputSize });
    return decodeRaw(body, model, modelName, modelVersion);
  }
  if (headerLength > maxInputSize) {
    throw new InferenceError("INPUT_SIZE_EXCEEDED", { size: headerLength, limit: maxInputSize });
  }

  const json = parseBody(body.bytes.subarray(0, headerLength));
  const idJson = member(json, "id");
  const id = idJson === undefined ? "" : field("id", () => asString(idJson));
  const { parameters, binaryByDefault } = requestParameters(member(json, "parameters"));

  const inputs: Tensor[] = [];
  let cursor = headerLength;
  for (const input of field("inputs", () => asArray(required(json, "inputs")))) {
    checkDataChoice(input);
    const name = field("name", () => asString(required(input, "name")));
    const type = field("datatype", () => asString(required(input, "datatype")));
    const dims = field("shape", () => asArray(required(input, "shape")).map(asUint));
    const shape = dims.map(Number);
    const params = member(input, "parameters");
    const binarySize = member(params, "binary_data_size");
    let data: Uint8Array;
    if (binarySize !== undefined) {
      const wanted = field("binary_data_size", () => asUint(binarySize));
      if (wanted === 0n) {
        data = new Uint8Array(0);
      } else {
        if (headerValue === undefined) throw new InferenceError("HEADER_LENGTH_REQUIRED");
        const available = BigInt(size - cursor);
        if (available < wanted) {
          throw new InferenceError("SHORT_INPUT_DATA", { input: name, size: wanted - available, model: modelName });
        }
        data = new Uint8Array(body.buffer, body.offset + cursor, Number(wanted));
        cursor += Number(wanted);
      }
    } else if (member(params, "shared_memory_region") !== undefined) {
      // The core reads the bytes from the region before validating the request.
      inputs.push({
        name,
        datatype: type as ProtocolDataType,
        shape,
        data: new Uint8Array(0),
        parameters: {},
        sharedMemory: sharedMemory(params),
      });
      continue;
    } else {
      // A zero dimension means no elements, however large the others (their product may overflow).
      const count = shape.includes(0) ? 0 : jsonElementCount(name, type, dims);
      // Triton sizes JSON data before reading it (a BYTES tensor's from its strings) and
      // refuses it past --http-max-input-size.
      const elementSize = type === "BYTES" ? 0 : (datatype(type)?.byteSize ?? 0);
      const tooLarge = (bytes: number) =>
        new InferenceError("JSON_INPUT_TOO_LARGE", { input: name, size: bytes, limit: maxInputSize });
      if (count * elementSize > maxInputSize) throw tooLarge(count * elementSize);
      data =
        count === 0
          ? new Uint8Array(0)
          : tensorFromJson(
              name,
              type,
              count,
              field("data", () => asDataArray(required(input, "data"))),
              id,
            );
      if (data.byteLength > maxInputSize) throw tooLarge(data.byteLength);
    }
    inputs.push({ name, datatype: type as ProtocolDataType, shape, data, parameters: {}, movable: true });
  }
  if (cursor !== size) throw new InferenceError("EXTRA_INPUT_DATA", { model: modelName });

  const { outputs, listed } = requestedOutputs(member(json, "outputs"));
  return {
    request: { modelName, modelVersion, id, parameters, inputs, outputs },
    plan: { listed, binaryByDefault },
  };
}

/** Exactly one of `data`, `binary_data_size`, `shared_memory_region` per input. */
function checkDataChoice(input: JsonValue): void {
  const params = member(input, "parameters");
  const set = [
    member(input, "data") !== undefined ? "'data'" : "",
    member(params, "binary_data_size") !== undefined ? "'binary_data_size'" : "",
    member(params, "shared_memory_region") !== undefined ? "'shared_memory_region'" : "",
  ].filter((s) => s !== "");
  if (set.length !== 1) {
    throw new InferenceError("INPUT_DATA_CHOICE", {
      detail: set.length === 0 ? "no field is set" : `set ${set.join(" ")}`,
    });
  }
}

/**
 * Request parameters with Triton's HTTP types (PROTOCOL.md §1.4): `sequence_id` uint64 or
 * string, `sequence_start`/`sequence_end` bool, `priority`/`timeout` uint64, the frontend's own
 * `binary_data_output` bool, `triton_*` reserved; any other key a string, int, bool or double.
 */
function requestParameters(json: JsonValue | undefined): { parameters: Parameters; binaryByDefault: boolean } {
  const parameters: Parameters = {};
  let binaryByDefault = false;
  if (json === undefined) return { parameters, binaryByDefault };
  for (const key of internal("failed to get request params.", () => members(json))) {
    const value = (json as JsonObject).get(key) as JsonValue;
    switch (key) {
      case "sequence_id":
        parameters[key] =
          (typeof value === "number" || typeof value === "bigint") && value >= 0
            ? BigInt(value)
            : field(key, () => asString(value));
        break;
      case "sequence_start":
      case "sequence_end":
        parameters[key] = field(key, () => asBool(value));
        break;
      case "priority":
      case "timeout":
        parameters[key] = field(key, () => asUint(value));
        break;
      case "binary_data_output":
        binaryByDefault = field(key, () => asBool(value));
        break;
      default:
        if (key.startsWith("triton_")) throw new InferenceError("RESERVED_PARAMETER");
        parameters[key] = customParameter(key, value);
    }
  }
  return { parameters, binaryByDefault };
}

/**
 * A parameter with no meaning to the frontend, in rapidjson's order: string, int32 (an int
 * parameter), bool, any other number (a double). @throws {@link InferenceError} PARAMETER_TYPE_HTTP
 */
export function customParameter(key: string, value: JsonValue): Parameters[string] {
  if (typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number" && value >= -(2 ** 31) && value < 2 ** 31) return BigInt(value);
  if (typeof value === "number" || typeof value === "bigint") return Number(value);
  if (value instanceof JsonFloat) return value.value;
  throw new InferenceError("PARAMETER_TYPE_HTTP", { name: key });
}

/** Requested outputs: `classification` (uint) and `binary_data` (bool) per output. */
function requestedOutputs(json: JsonValue | undefined): { outputs: RequestedOutput[]; listed: Map<string, boolean> } {
  const outputs: RequestedOutput[] = [];
  const listed = new Map<string, boolean>();
  if (json === undefined) return { outputs, listed };
  for (const output of field("outputs", () => asArray(json))) {
    const params = member(output, "parameters");
    const binaryJson = member(params, "binary_data");
    const shm = member(params, "shared_memory_region") !== undefined;
    if (shm && member(params, "classification") !== undefined) {
      throw new InferenceError("OUTPUT_SHM_CONFLICT", { other: "classification" });
    }
    if (shm && binaryJson !== undefined && internal("Unable to set 'binary_data'", () => asBool(binaryJson))) {
      throw new InferenceError("OUTPUT_SHM_CONFLICT", { other: "binary_data" });
    }
    const name = field("name", () => asString(required(output, "name")));
    const classJson = member(params, "classification");
    const classes = classJson === undefined ? 0n : internal("Unable to set 'classification'", () => asUint(classJson));
    if (shm) {
      const ref = sharedMemory(params);
      listed.set(name, false);
      outputs.push({
        name,
        parameters: {
          shared_memory_region: ref.region,
          shared_memory_offset: ref.offset,
          shared_memory_byte_size: ref.byteSize,
        },
      });
      continue;
    }
    listed.set(name, binaryJson === undefined ? false : field("binary_data", () => asBool(binaryJson)));
    // Classification 0 means none, as in Triton.
    outputs.push({ name, parameters: classes > 0n ? { classification: Number(classes) } : {} });
  }
  return { outputs, listed };
}

/** A tensor's shared-memory parameters (region, offset, byte size), with Triton's type errors. */
function sharedMemory(params: JsonValue | undefined): SharedMemoryRef {
  const region = field("shared_memory_region", () => asString(member(params, "shared_memory_region")));
  const number = (key: string) => {
    const value = member(params, key);
    return value === undefined ? 0 : Number(field(key, () => asUint(value)));
  };
  return { region, offset: number("shared_memory_offset"), byteSize: number("shared_memory_byte_size") };
}

// Raw binary requests.

/** Whether a raw request (header length 0) to this model carries one BYTES element. */
export function rawIsBytes(model: ModelView): boolean {
  const input = model.config.input;
  return input.length === 1 && dataTypeToProtocol((input[0] as (typeof input)[0]).dataType) === "BYTES";
}

/**
 * A raw binary request (`Inference-Header-Content-Length: 0`): the body is the data of the
 * model's single input, batch 1, its shape deduced from the config; every output is binary.
 */
export function decodeRaw(body: Body, model: ModelView, modelName: string, modelVersion: string): DecodedInfer {
  const config = model.config;
  const input = config.input[0];
  if (config.input.length !== 1 || !input) {
    throw new InferenceError("RAW_INPUT_COUNT", { count: config.input.length, model: modelName });
  }
  const shape = config.maxBatchSize > 0 ? [1] : [];
  let variable = -1;
  let known = 1;
  for (const d of input.dims) {
    const dim = Number(d);
    if (dim === -1) {
      if (variable !== -1) throw new InferenceError("RAW_VARIABLE_DIMS", { input: input.name });
      variable = shape.length;
    } else {
      known *= dim;
    }
    shape.push(dim);
  }
  const type = dataTypeToProtocol(input.dataType) as ProtocolDataType;
  const size = body.bytes.byteLength;
  let data: Uint8Array;
  if (type === "BYTES") {
    if (variable !== -1 || known !== 1) throw new InferenceError("RAW_BYTES_SHAPE", { input: input.name });
    // One element: the 4-byte length goes in the room left before the body.
    if (body.offset >= 4) {
      data = new Uint8Array(body.buffer, body.offset - 4, size + 4);
    } else {
      data = new Uint8Array(size + 4);
      data.set(body.bytes, 4);
    }
    new DataView(data.buffer, data.byteOffset, 4).setUint32(0, size, true);
  } else {
    if (variable !== -1) {
      const unit = known * (datatype(type)?.byteSize ?? 1);
      if (unit === 0 ? size !== 0 : size % unit !== 0) {
        throw new InferenceError("RAW_SIZE", { input: input.name, size, shape: dimsString(shape.map(BigInt)) });
      }
      shape[variable] = unit === 0 ? 0 : size / unit;
    }
    data = body.bytes;
  }
  return {
    request: {
      modelName,
      modelVersion,
      id: "",
      parameters: {},
      inputs: [{ name: input.name, datatype: type, shape, data, parameters: {}, movable: true }],
      outputs: [],
    },
    plan: { listed: new Map(), binaryByDefault: true },
  };
}
