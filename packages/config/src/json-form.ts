import {
  type DescField,
  type DescMessage,
  fromJson,
  type JsonObject,
  type JsonValue,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import { type ModelConfig, ModelConfigSchema } from "@galley/proto";

/**
 * 64-bit fields that Triton leaves as JSON strings when it prints a config; every other 64-bit
 * field becomes a JSON number (PROTOCOL.md §3.14, a quirk of Triton's `ModelConfigToJson`).
 */
const KEEP_AS_STRING = new Set([
  "inference.ModelOptimizationPolicy.Cuda.GraphSpec.Shape.dim",
  "inference.ModelInstanceGroup.SecondaryDevice.device_id",
]);

const INT64_TYPES = new Set([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

/** A config that cannot be read from JSON (unknown field, bad enum name, wrong type). */
export class ConfigJsonError extends Error {
  override name = "ConfigJsonError";
}

/**
 * A {@link ModelConfig} in Triton's JSON form, as `GET /v2/models/{m}/config` returns it:
 * snake_case names, default scalars and empty lists/maps printed, unset messages omitted, enums
 * by name, and 64-bit integers as JSON numbers — except `graph_spec` shape dims and secondary
 * device ids, which Triton leaves as strings. `priority_queue_policy` keys are strings.
 * Values beyond 2^53 stay strings, since a JavaScript number cannot hold them exactly.
 */
export function toModelConfigJson(config: ModelConfig): JsonObject {
  const json = toJson(ModelConfigSchema, config, { useProtoFieldName: true, alwaysEmitImplicit: true });
  return walk(ModelConfigSchema, json, int64ToNumber) as JsonObject;
}

/**
 * The JSON text of {@link toModelConfigJson}, compact as Triton writes it; a config that is
 * entirely defaults prints as the empty string, as in Triton.
 */
export function printModelConfigJson(config: ModelConfig): string {
  const json = toJson(ModelConfigSchema, config);
  if (json !== null && typeof json === "object" && Object.keys(json).length === 0) return "";
  return JSON.stringify(toModelConfigJson(config));
}

/**
 * Read a config from Triton's JSON form (the `config` parameter of a load request, or
 * {@link toModelConfigJson} output). As in Triton: snake_case or lowerCamel names, enum names in
 * any case, integers as numbers or strings; unknown fields are errors.
 *
 * @throws {@link ConfigJsonError}
 */
export function fromModelConfigJson(json: string | JsonValue): ModelConfig {
  let value: JsonValue;
  try {
    value = typeof json === "string" ? (JSON.parse(json) as JsonValue) : json;
  } catch (error) {
    throw new ConfigJsonError(`failed to parse the model configuration JSON: ${(error as Error).message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new ConfigJsonError("the model configuration JSON must be an object");
  }
  try {
    return fromJson(ModelConfigSchema, walk(ModelConfigSchema, value, enumNameAnyCase));
  } catch (error) {
    throw new ConfigJsonError((error as Error).message);
  }
}

type Visit = (field: DescField, value: JsonValue) => JsonValue;

/** Apply `visit` to every scalar or enum value in `json`, guided by the message schema. */
function walk(desc: DescMessage, json: JsonValue, visit: Visit): JsonValue {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return json;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(json)) {
    const field = desc.fields.find((f) => f.name === key || f.jsonName === key);
    out[key] = field && value !== null ? walkField(field, value, visit) : value;
  }
  return out;
}

function walkField(field: DescField, value: JsonValue, visit: Visit): JsonValue {
  const one = (v: JsonValue): JsonValue => {
    if (field.message) return walk(field.message, v, visit);
    return visit(field, v);
  };
  if (field.fieldKind === "list" && Array.isArray(value)) return value.map(one);
  if (field.fieldKind === "map" && value !== null && typeof value === "object" && !Array.isArray(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, one(v)]));
  }
  return one(value);
}

function int64ToNumber(field: DescField, value: JsonValue): JsonValue {
  if (typeof value !== "string" || field.scalar === undefined || !INT64_TYPES.has(field.scalar)) return value;
  if (KEEP_AS_STRING.has(`${field.parent.typeName}.${field.name}`)) return value;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value;
}

function enumNameAnyCase(field: DescField, value: JsonValue): JsonValue {
  if (!field.enum || typeof value !== "string") return value;
  const upper = value.toUpperCase();
  return field.enum.values.find((v) => v.name.toUpperCase() === upper)?.name ?? value;
}
