import { toJson } from "@bufbuild/protobuf";
import { toModelConfigJson } from "@galley/config";
import { ModelStatisticsResponseSchema } from "@galley/proto";
import { InferenceError } from "../../base/errors.js";
import { statisticsResponse } from "../../core/statistics-report.js";
import type { HttpAnswer } from "../transport/http-exchange.js";
import { type Context, empty, json, jsonText } from "./context.js";

/** `GET /v2/models/{m}[/versions/{v}]`: name, versions, platform, inputs, outputs. */
export function handleModelMetadata(ctx: Context, model: string, version: string): HttpAnswer {
  return json(200, ctx.server.modelMetadata(model, version));
}

/** `GET .../ready`: 200 with an empty body, or 400 `Model version not ready`. */
export async function handleModelReady(ctx: Context, model: string, version: string): Promise<HttpAnswer> {
  if (!(await ctx.server.modelReady(model, version))) throw new InferenceError("MODEL_NOT_READY_HTTP");
  return empty(200, false);
}

/** `GET .../config`: the final config in Triton's JSON form (PROTOCOL.md §3.14). */
export function handleModelConfig(ctx: Context, model: string, version: string): HttpAnswer {
  return jsonText(200, JSON.stringify(toModelConfigJson(ctx.server.modelConfig(model, version))));
}

/** `GET /v2/models/stats` and `GET .../stats`: `{"model_stats":[...]}` (PROTOCOL.md §8.1). */
export function handleStatistics(ctx: Context, model: string, version: string): HttpAnswer {
  const message = statisticsResponse(ctx.server.statistics(model, version));
  return json(200, statisticsJson(message));
}

/** The statistics as Triton's JSON: protobuf JSON with its 64-bit strings as numbers, keys in Triton's order. */
function statisticsJson(message: ReturnType<typeof statisticsResponse>): unknown {
  const fields = toJson(ModelStatisticsResponseSchema, message, { useProtoFieldName: true, alwaysEmitImplicit: true });
  const numbers = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(numbers);
    if (value === null || typeof value !== "object") return value;
    const out: Record<string, unknown> = {};
    for (const [key, element] of Object.entries(value)) {
      out[key] = typeof element === "string" && INT64_KEYS.has(key) ? BigInt(element) : numbers(element);
    }
    return out;
  };
  const converted = numbers(fields) as { model_stats?: Record<string, unknown>[] };
  return {
    model_stats: (converted.model_stats ?? []).map((m) => Object.fromEntries(ORDER.map((key) => [key, m[key]]))),
  };
}

/** Fields of the statistics messages that are 64-bit integers (printed as strings by protobuf JSON). */
const INT64_KEYS = new Set([
  "last_inference",
  "inference_count",
  "execution_count",
  "count",
  "ns",
  "batch_size",
  "id",
  "byte_size",
]);

const ORDER = [
  "name",
  "version",
  "last_inference",
  "inference_count",
  "execution_count",
  "inference_stats",
  "response_stats",
  "batch_stats",
  "memory_usage",
];
