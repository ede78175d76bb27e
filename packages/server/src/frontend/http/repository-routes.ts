import { InferenceError } from "../../base/errors.js";
import type { HttpAnswer } from "../transport/http-exchange.js";
import { type Context, empty, json, jsonBody } from "./context.js";
import { asBool, asString, internal, JsonAccessError, member, members } from "./json-access.js";
import type { JsonObject } from "./json-parse.js";

/**
 * `POST /v2/repository[/{repo}]/index`: every model folder with its versions' states and
 * reasons; an optional `{"ready":bool}` keeps the READY ones. The repository name is ignored.
 */
export async function handleIndex(ctx: Context): Promise<HttpAnswer> {
  const body = await jsonBody(ctx);
  const readyJson = member(body, "ready");
  let ready = false;
  if (readyJson !== undefined) {
    if (typeof readyJson !== "boolean") {
      throw new InferenceError("BAD_INDEX_READY");
    }
    ready = readyJson;
  }
  return json(200, await ctx.server.repositoryIndex(ready));
}

/**
 * `POST /v2/repository/models/{m}/load` with optional `{"parameters":{"config":"<json>",
 * "file:<version>/<path>":"<base64>"}}`. Every value must be a string, as in Triton. Loading
 * needs explicit model control (503 otherwise).
 */
export async function handleLoad(ctx: Context, repository: string, model: string): Promise<HttpAnswer> {
  await ctx.server.loadModel(model, repository, async () => {
    const json = await jsonBody(ctx);
    let config: string | undefined;
    const files = new Map<string, Uint8Array>();
    const parameters = member(json, "parameters");
    if (parameters !== undefined) {
      for (const name of internal("", () => members(parameters))) {
        const value = internal("", () => asString((parameters as JsonObject).get(name)));
        if (name === "config") config = value;
        // Lenient base64, as Triton's decoder: characters outside the alphabet are skipped.
        else if (name.startsWith("file:")) files.set(name, new Uint8Array(Buffer.from(value, "base64")));
        else throw new InferenceError("LOAD_PARAMETER_HTTP");
      }
    }
    return { ...(config !== undefined ? { config } : {}), files };
  });
  return empty(200);
}

/**
 * `POST /v2/repository/models/{m}/unload` with optional `{"parameters":{"unload_dependents":
 * bool}}`. As in Triton, a body that cannot be read is ignored and the model is unloaded alone.
 */
export async function handleUnload(ctx: Context, repository: string, model: string): Promise<HttpAnswer> {
  await ctx.server.unloadModel(model, repository, async () => {
    try {
      const value = member(member(await jsonBody(ctx), "parameters"), "unload_dependents");
      return value !== undefined && asBool(value);
    } catch (error) {
      const unreadable =
        error instanceof JsonAccessError || (error instanceof InferenceError && error.id === "BAD_JSON");
      if (!unreadable) throw error;
      return false;
    }
  });
  return empty(200);
}
