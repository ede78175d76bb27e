import type { InferenceServer } from "../../core/inference-server.js";
import type { HttpAnswer, HttpRequest } from "../transport/http-exchange.js";
import { parseBody } from "./json-access.js";
import type { JsonValue } from "./json-parse.js";
import { jsonBytes } from "./json-write.js";
import type { LoadSource } from "./load-report.js";

/** What a route works with. */
export interface Context {
  server: InferenceServer;
  request: HttpRequest;
  /** `--http-max-input-size`: JSON documents, JSON and raw input data, decompressed bodies. */
  limit: number;
  /** `--http-max-body-size`: an inference request's body as received (binary data included). */
  bodyLimit: number;
  /** Where load reports read from (metrics on); without it no `endpoint-load-metrics` header. */
  load?: LoadSource;
}

const JSON_TYPE = { "Content-Type": "application/json" };

/** Compact JSON of `value` (Triton's writer: see {@link jsonBytes}). */
export function json(status: number, value: unknown, headers: Record<string, string> = {}): HttpAnswer {
  return { status, headers: { ...JSON_TYPE, ...headers }, parts: [jsonBytes(value)] };
}

/** JSON text already serialized. */
export function jsonText(status: number, text: string): HttpAnswer {
  return { status, headers: JSON_TYPE, parts: [Buffer.from(text)] };
}

/** An empty body: health answers carry no content type, the others `application/json`. */
export function empty(status: number, withType = true): HttpAnswer {
  return { status, headers: withType ? JSON_TYPE : {}, parts: [] };
}

/**
 * The body of a control request (index, load, logging, ...) as JSON, or undefined when it is
 * empty. These bodies are never decompressed, as in Triton.
 */
export async function jsonBody(ctx: Context): Promise<JsonValue | undefined> {
  const body = await ctx.request.body({ limit: ctx.limit, encoding: "identity" });
  return body.bytes.byteLength === 0 ? undefined : parseBody(body.bytes);
}

/** Like {@link jsonBody}, but an empty body is a parse error too (Triton parses it regardless). */
export async function requiredJsonBody(ctx: Context): Promise<JsonValue> {
  const body = await ctx.request.body({ limit: ctx.limit, encoding: "identity" });
  return parseBody(body.bytes);
}
