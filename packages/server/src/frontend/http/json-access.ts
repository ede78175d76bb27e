import { InferenceError } from "../../base/errors.js";
import {
  isDecimalArray,
  JsonFloat,
  type JsonObject,
  JsonSyntaxError,
  type JsonValue,
  parseJson,
} from "./json-parse.js";

/**
 * Typed reads of parsed JSON with the messages of Triton's TritonJson accessors
 * (`attempt to access JSON non-string as string`, ...). Callers add the context Triton adds.
 */
export class JsonAccessError extends Error {}

const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;

/**
 * Parse a request body as JSON. @throws {@link InferenceError} BAD_JSON (500):
 * `failed to parse the request JSON buffer: <rapidjson message> at <offset>`. Objects and arrays
 * nested past `MAX_DEPTH` are read but not kept (see `JsonTooDeep`).
 */
export function parseBody(bytes: Uint8Array): JsonValue {
  try {
    return parseJson(bytes);
  } catch (error) {
    if (error instanceof JsonSyntaxError) throw new InferenceError("BAD_JSON", { detail: error.message });
    throw error;
  }
}

export function isObject(value: JsonValue | undefined): value is JsonObject {
  return value instanceof Map;
}

/** `Find`: the member, or undefined when absent or when `value` is not an object. */
export function member(value: JsonValue | undefined, name: string): JsonValue | undefined {
  return value instanceof Map ? value.get(name) : undefined;
}

/** `MemberAs*`: the member must exist. */
export function required(value: JsonValue | undefined, name: string): JsonValue {
  const found = member(value, name);
  if (found === undefined) throw new JsonAccessError(`attempt to access non-existing object member '${name}'`);
  return found;
}

export function asString(value: JsonValue | undefined): string {
  if (typeof value !== "string") throw new JsonAccessError("attempt to access JSON non-string as string");
  return value;
}

export function asBool(value: JsonValue | undefined): boolean {
  if (typeof value !== "boolean") throw new JsonAccessError("attempt to access JSON non-boolean as boolean");
  return value;
}

/** `AsArray`: the elements, every decimal literal as a {@link JsonFloat}. */
export function asArray(value: JsonValue | undefined): JsonValue[] {
  if (!Array.isArray(value)) throw new JsonAccessError("attempt to access JSON non-array as array");
  return isDecimalArray(value) ? value.map((v) => new JsonFloat(v)) : value;
}

/** `AsArray` for tensor data: a decimal array stays as it was parsed, for `tensorFromJson`'s fast path. */
export function asDataArray(value: JsonValue | undefined): JsonValue[] {
  if (!Array.isArray(value)) throw new JsonAccessError("attempt to access JSON non-array as array");
  return value;
}

/** `AsUInt`: a non-negative integer literal within uint64. */
export function asUint(value: JsonValue | undefined): bigint {
  if ((typeof value === "number" || typeof value === "bigint") && value >= 0) return BigInt(value);
  throw new JsonAccessError("attempt to access JSON non-unsigned-integer as unsigned-integer");
}

/** `AsInt`: an integer literal within int64. */
export function asInt(value: JsonValue | undefined): bigint {
  if (typeof value === "number") return BigInt(value);
  if (typeof value === "bigint" && value >= INT64_MIN && value <= INT64_MAX) return value;
  throw new JsonAccessError("attempt to access JSON non-signed-integer as signed-integer");
}

/** `AsDouble`: any number. */
export function asDouble(value: JsonValue | undefined): number {
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  if (value instanceof JsonFloat) return value.value;
  throw new JsonAccessError("attempt to access JSON non-number as double");
}

/** `Members`: the object's keys. */
export function members(value: JsonValue | undefined): string[] {
  if (!(value instanceof Map)) throw new JsonAccessError("attempt to get members for non-object");
  return [...value.keys()];
}

/**
 * Run a read and report an accessor failure as Triton's `RETURN_MSG_IF_ERR` does:
 * INTERNAL (500) `Unable to parse '<field>': <detail>`.
 */
export function field<T>(name: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof JsonAccessError)
      throw new InferenceError("JSON_FIELD", { field: name, detail: error.message });
    throw error;
  }
}

/**
 * Run a read and report an accessor failure with Triton's own wording: INTERNAL (500) with
 * `<prefix>: <detail>`, or the bare accessor message when there is no prefix.
 */
export function internal<T>(prefix: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof JsonAccessError) throw internalError(prefix ? `${prefix}: ${error.message}` : error.message);
    throw error;
  }
}

/**
 * An INTERNAL (500) error with a message of Triton's that the error table has no id for yet
 * (JSON accessor failures outside a named field). Uses the table's generic INTERNAL entry.
 */
export function internalError(message: string): InferenceError {
  return new InferenceError("JSON_ACCESS", { detail: message });
}

/** An INVALID_ARG (400) error with a message of Triton's that the error table has no id for yet. */
export function invalidArgument(message: string): InferenceError {
  return new InferenceError("BAD_PARAMETER", { message });
}
