import type { ProtocolDataType } from "@galley/config";
import { InferenceError } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Parameters, Tensor } from "../../base/tensor.js";
import type { TensorMetadata } from "../../core/inference-server.js";
import { customParameter } from "./infer-request.js";
import {
  asString,
  field,
  internal,
  invalidArgument,
  isObject,
  JsonAccessError,
  member,
  members,
} from "./json-access.js";
import type { JsonObject, JsonValue } from "./json-parse.js";
import { tensorFromJson } from "./json-tensor.js";

/**
 * Deduce an input's shape from its metadata shape (batch dimension included) and the number of
 * values given, as Triton's generate does: every fixed dimension must divide the count, the
 * innermost `-1` takes what is left and the other `-1`s become 1. Undefined when that fails.
 */
export function generateShape(dims: readonly number[], count: number): number[] | undefined {
  const shape = [...dims];
  let rest = count;
  for (let i = shape.length - 1; i >= 0; i--) {
    const d = shape[i] as number;
    if (d === -1) continue;
    if (d === 0 ? rest !== 0 : rest % d !== 0) return undefined;
    // A zero dimension makes the tensor empty whatever the others are.
    rest = d === 0 ? 1 : rest / d;
  }
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === -1) {
      shape[i] = rest;
      rest = 1;
    }
  }
  return rest === 1 ? shape : undefined;
}

/** Parameters the server itself reads, with the types the infer route takes (PROTOCOL.md §1.4). */
const RESERVED = new Set(["sequence_id", "sequence_start", "sequence_end", "priority", "timeout"]);

/**
 * A reserved parameter's value: `sequence_id` an unsigned integer or a string, `sequence_start`
 * and `sequence_end` booleans, `priority` and `timeout` unsigned integers.
 * @throws {@link InferenceError} PARAMETER_VALUE_TYPE (400) naming the parameter otherwise.
 */
function reservedParameter(key: string, value: JsonValue): Parameters[string] {
  const unsigned = (typeof value === "number" || typeof value === "bigint") && value >= 0;
  if (key === "sequence_id" && (unsigned || typeof value === "string")) return unsigned ? BigInt(value) : value;
  if ((key === "sequence_start" || key === "sequence_end") && typeof value === "boolean") return value;
  if ((key === "priority" || key === "timeout") && unsigned) return BigInt(value);
  throw new InferenceError("PARAMETER_VALUE_TYPE", { name: key });
}

/**
 * Decode a generate body (PROTOCOL.md §1.10, Triton's `ConvertGenerateRequest`): `id` is the
 * request id; every other key, at the top level or inside `parameters`, becomes the input of
 * that name (a scalar or a 1-D array, shaped by {@link generateShape}) or else a request
 * parameter (string, int, bool or double; the reserved `sequence_*`, `priority` and `timeout`
 * must have the types the server reads them as). Keys are read in the order given.
 *
 * @throws {@link InferenceError} with Triton's texts and codes.
 */
export function decodeGenerate(
  json: JsonValue,
  inputs: readonly TensorMetadata[],
  modelName: string,
  modelVersion: string,
): InferenceRequest {
  const idJson = member(json, "id");
  const id = idJson === undefined ? "" : field("id", () => asString(idJson));
  const byName = new Map(inputs.map((input) => [input.name, input]));
  const request: InferenceRequest = { modelName, modelVersion, id, parameters: {}, inputs: [], outputs: [] };
  const convert = (object: JsonObject, key: string) => {
    const value = object.get(key) as JsonValue;
    const input = byName.get(key);
    if (input) request.inputs.push(generateInput(input, value, id));
    else request.parameters[key] = RESERVED.has(key) ? reservedParameter(key, value) : customParameter(key, value);
  };
  const object = json as JsonObject;
  for (const key of internal("", () => members(json))) {
    if (key === "id") continue;
    if (key === "parameters") convertParameters(object.get(key) as JsonValue, byName, convert);
    else convert(object, key);
  }
  return request;
}

/** The nested `parameters` object: its keys follow the top-level rule, errors say where they were. */
function convertParameters(
  value: JsonValue,
  inputs: ReadonlyMap<string, TensorMetadata>,
  convert: (object: JsonObject, key: string) => void,
): void {
  if (inputs.has("parameters")) {
    throw invalidArgument("Keyword 'parameters' for nested schema also given as input tensor name");
  }
  const object = internal("Expected JSON object for keyword: 'parameters'", () => {
    if (!isObject(value)) throw new JsonAccessError("attempt to access JSON non-object as object");
    return value;
  });
  try {
    for (const key of object.keys()) convert(object, key);
  } catch (error) {
    if (!(error instanceof InferenceError)) throw error;
    // Triton's RETURN_MSG_IF_ERR: the inner error's code with a prefixed message.
    throw new InferenceError(
      "BAD_PARAMETER",
      { message: `Converting keyword: 'parameters': ${error.message}` },
      { code: error.code, cause: error },
    );
  }
}

function generateInput(input: TensorMetadata, value: JsonValue, id: string): Tensor {
  const data = Array.isArray(value) ? value : [value];
  const shape = generateShape(input.shape, data.length);
  if (!shape) {
    throw invalidArgument(`The schema can not convert input '${input.name}' to tensor with proper shape`);
  }
  return {
    name: input.name,
    datatype: input.datatype as ProtocolDataType,
    shape,
    data: tensorFromJson(input.name, input.datatype, data.length, data, id),
    parameters: {},
    movable: true,
  };
}
