import type { IncomingMessage, ServerResponse } from "node:http";
import { hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceServer } from "../../core/inference-server.js";
import type { LeanAnswer, LeanHandler } from "../transport/http1-lean.js";
import type { Http1Timeouts } from "../transport/listen-http1.js";
import { ClientGone, DEFAULT_MAX_INPUT_SIZE } from "./body.js";
import { ACCEPTED_ENCODINGS, responseEncoding } from "./compression.js";
import type { Context } from "./context.js";
import { handleGenerate } from "./generate-route.js";
import { httpStatus } from "./http-status.js";
import { answerInfer, bodyOffset, handleInfer, inferModel } from "./infer-route.js";
import { jsonBytes } from "./json-write.js";
import { handleModelConfig, handleModelMetadata, handleModelReady, handleStatistics } from "./model-routes.js";
import { Reply } from "./reply.js";
import { handleIndex, handleLoad, handleUnload } from "./repository-routes.js";
import { categoryOf, matchRoute, methodsOf, type Route } from "./routes.js";
import { handleHealth, handleLogging, handleServerMetadata, handleSharedMemory, handleTrace } from "./server-routes.js";

/** REST frontend options (tritonserver's `--http-*` flags, and Galley's connection time limits). */
export interface HttpFrontendOptions extends Http1Timeouts {
  /** `--http-max-input-size`: the largest request body, decompressed (default 64 MiB). */
  maxInputSize?: number;
  /** `--http-restricted-api=<apis>:<key>=<value>`: the header `<key>` must carry `<value>`. */
  restricted?: readonly { apis: readonly string[]; key: string; value: string }[];
}

/** Routes refused (503 `Server not ready`) once the server has begun shutting down. */
const STARTS_WORK: ReadonlySet<Route["kind"]> = new Set(["infer", "generate", "generate_stream", "load", "unload"]);

/**
 * The KServe v2 REST frontend: a Node `request` listener over one {@link InferenceServer}.
 * Routing follows Triton's full-match regexes on the raw path (the query string is ignored);
 * each route checks its restricted-API category, then its method, then runs. Every failure is
 * answered `{"error":"<message>"}` with the error's status; nothing a client sends can throw
 * out of the listener. Once shutdown has begun, inference and repository changes are refused
 * with 503 `Server not ready` (the other routes still answer) and every reply carries
 * `Connection: close`.
 */
export function createHttpHandler(
  server: InferenceServer,
  options: HttpFrontendOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const limit = options.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE;
  return (req, res) => {
    const ctx: Context = { server, req, reply: new Reply(res, server), limit };
    try {
      const route = matchRoute(req.url ?? "/");
      if (!route) throw new InferenceError("NOT_FOUND_ROUTE");
      const rule = options.restricted?.find((r) => r.apis.includes(categoryOf(route)));
      if (rule && req.headers[rule.key.toLowerCase()] !== rule.value) {
        throw new InferenceError("RESTRICTED_HTTP", { header: rule.key });
      }
      if (!methodsOf(route).includes(req.method ?? "")) throw new InferenceError("METHOD_NOT_ALLOWED");
      // Draining: a request that arrives on a kept-alive connection is answered, but starts no work.
      if (!server.accepting && STARTS_WORK.has(route.kind)) throw new InferenceError("SERVER_NOT_READY");
      dispatch(ctx, route).catch((error: unknown) => fail(ctx, error));
    } catch (error) {
      fail(ctx, error);
    }
  };
}

async function dispatch(ctx: Context, route: Route): Promise<void> {
  switch (route.kind) {
    case "health":
      return handleHealth(ctx, route.which);
    case "server-metadata":
      return handleServerMetadata(ctx);
    case "model-metadata":
      return handleModelMetadata(ctx, route.model, route.version);
    case "ready":
      return handleModelReady(ctx, route.model, route.version);
    case "config":
      return handleModelConfig(ctx, route.model, route.version);
    case "stats":
      return handleStatistics(ctx, route.model, route.version);
    case "all-stats":
      return handleStatistics(ctx, "", "");
    case "infer":
      return handleInfer(ctx, route.model, route.version);
    case "generate":
      return handleGenerate(ctx, route.model, route.version, false);
    case "generate_stream":
      return handleGenerate(ctx, route.model, route.version, true);
    case "trace/setting":
      return handleTrace(ctx, route.model);
    case "trace":
      return handleTrace(ctx);
    case "logging":
      return handleLogging(ctx);
    case "index":
      return handleIndex(ctx);
    case "load":
      return handleLoad(ctx, route.repository, route.model);
    case "unload":
      return handleUnload(ctx, route.repository, route.model);
    case "shm":
      return handleSharedMemory(ctx, route.memory, route.region, route.action);
  }
}

/**
 * Answer a failure. An {@link InferenceError} is answered as it is; anything else is a bug,
 * logged and answered 500 without its JavaScript text (see {@link toInferenceError}). A client
 * that is gone gets nothing.
 */
function fail(ctx: Context, error: unknown): void {
  if (error instanceof ClientGone || ctx.reply.closed) return;
  const { status, headers, body } = failureAnswer(ctx.server, ctx.req.method, ctx.req.url, error);
  try {
    ctx.reply.send(status, body, headers);
  } catch (replyError) {
    ctx.server.log.error(`HTTP ${ctx.req.method} ${ctx.req.url}: cannot reply: ${String(replyError)}`);
    ctx.req.socket.destroy();
  }
}

/** Triton's answer to `error` (`{"error":"<message>"}` and its status), logging what the client is not told. */
function failureAnswer(
  server: InferenceServer,
  method: string | undefined,
  url: string | undefined,
  error: unknown,
): { status: number; headers: Record<string, string>; body: Uint8Array[] } {
  const failure = toInferenceError(error);
  const detail =
    error instanceof InferenceError
      ? hiddenCause(failure)
      : error instanceof Error
        ? (error.stack ?? error.message)
        : String(error);
  if (detail !== undefined) server.log.error(`HTTP ${method} ${url}: ${detail}`);
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (failure.id === "UNSUPPORTED_COMPRESSION") headers["Accept-Encoding"] = ACCEPTED_ENCODINGS;
  return { status: httpStatus(failure), headers, body: [jsonBytes({ error: failure.message })] };
}

/**
 * The REST frontend's side of the lean HTTP/1 path (`../http1-lean.ts`): `POST .../infer`, read
 * and answered as {@link handleInfer} does, while no trace setting is on (a traced request is
 * Node's, whose timestamps the trace records). Undefined when an `--http-restricted-api` rule
 * covers inference: every request then goes through Node's server and the rule's check.
 */
export function createLeanInfer(server: InferenceServer, options: HttpFrontendOptions = {}): LeanHandler | undefined {
  if (options.restricted?.some((rule) => rule.apis.includes("inference"))) return undefined;
  return {
    limit: options.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE,
    call(head) {
      const route = matchRoute(head.target);
      if (route?.kind !== "infer" || server.tracing.enabled) return undefined;
      const failed = (error: unknown): LeanAnswer => {
        const { status, headers, body } = failureAnswer(server, "POST", head.target, error);
        return { status, headers, parts: body };
      };
      try {
        const model = inferModel(server, route.model, route.version);
        const replyEncoding = responseEncoding(head.acceptEncoding);
        const { model: name, version } = route;
        return {
          offset: bodyOffset(head.lengthHeader, model),
          answer: (body, signal) =>
            answerInfer(server, body, head.lengthHeader, model, name, version, replyEncoding, signal, undefined).then(
              ({ parts, headers }): LeanAnswer => ({ status: 200, parts, headers: headers as LeanAnswer["headers"] }),
              failed,
            ),
        };
      } catch (error) {
        return { offset: 0, answer: () => Promise.resolve(failed(error)) };
      }
    },
  };
}
