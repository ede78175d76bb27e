import type { IncomingMessage } from "node:http";
import type { InferenceServer } from "../../core/inference-server.js";
import { readBody } from "./body.js";
import { parseBody } from "./json-access.js";
import type { JsonValue } from "./json-parse.js";
import type { Reply } from "./reply.js";

/** What a route handler works with. */
export interface Context {
  server: InferenceServer;
  req: IncomingMessage;
  reply: Reply;
  /** `--http-max-input-size`. */
  limit: number;
}

/** A request header as one string (Node joins repeated custom headers with `, `). */
export function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * The body of a control request (index, load, logging, ...) as JSON, or undefined when it is
 * empty. These bodies are never decompressed, as in Triton.
 */
export async function jsonBody(ctx: Context): Promise<JsonValue | undefined> {
  const body = await readBody(ctx.req, { limit: ctx.limit, encoding: "identity" });
  return body.bytes.byteLength === 0 ? undefined : parseBody(body.bytes);
}

/** Like {@link jsonBody}, but an empty body is a parse error too (Triton parses it regardless). */
export async function requiredJsonBody(ctx: Context): Promise<JsonValue> {
  const body = await readBody(ctx.req, { limit: ctx.limit, encoding: "identity" });
  return parseBody(body.bytes);
}
