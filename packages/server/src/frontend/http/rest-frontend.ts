// The KServe v2 REST frontend: the route table, and one handler from request to answer that both
// HTTP/1 paths serve (`../transport/listen-http1.ts` chooses which reads each request).
import { answerableFailure, InferenceError } from "../../base/errors.js";
import type { InferenceServer } from "../../core/inference-server.js";
import {
  ClientGone,
  type HttpAnswer,
  type HttpHandler,
  type HttpRequest,
  type HttpService,
} from "../transport/http-exchange.js";
import type { LeanChoice } from "../transport/lean-head.js";
import type { Http1Timeouts } from "../transport/listen-http1.js";
import { ACCEPTED_ENCODINGS } from "./compression.js";
import { type Context, json } from "./context.js";
import { handleGenerate } from "./generate-route.js";
import { httpStatus } from "./http-status.js";
import { handleInfer } from "./infer-route.js";
import type { LoadSource } from "./load-report.js";
import { handleModelConfig, handleModelMetadata, handleModelReady, handleStatistics } from "./model-routes.js";
import { handleIndex, handleLoad, handleUnload } from "./repository-routes.js";
import { handleHealth, handleLogging, handleServerMetadata, handleSharedMemory, handleTrace } from "./server-routes.js";

/** The default `--http-max-input-size`: 64 MiB. */
export const DEFAULT_MAX_INPUT_SIZE = 1 << 26;

/** The default `--http-max-body-size`: 4 GiB (as much as one Node Buffer holds on every supported Node). */
export const DEFAULT_MAX_BODY_SIZE = 2 ** 32;

/** REST frontend options (tritonserver's `--http-*` flags, and Galley's connection time limits). */
export interface HttpFrontendOptions extends Http1Timeouts {
  /**
   * `--http-max-input-size` (default 64 MiB), as Triton applies it: the largest JSON document (an
   * inference request's JSON header, any other request's body), JSON input data (its byte size),
   * raw input and decompressed body. Binary tensor data after the JSON header is not limited by it.
   */
  maxInputSize?: number;
  /**
   * `--http-max-body-size` (Galley's own; default 4 GiB): the largest inference request body as
   * received, binary data included, a bound on the memory one request takes. Triton has none.
   */
  maxBodySize?: number;
  /** `--http-restricted-api=<apis>:<key>=<value>`: the header `<key>` must carry `<value>`. */
  restricted?: readonly { apis: readonly string[]; key: string; value: string }[];
  /**
   * What ORCA load reports (`endpoint-load-metrics`) read; set by the server when metrics are on.
   *
   * @internal
   */
  load?: LoadSource;
}

/** Routes refused (503 `Server not ready`) once the server has begun shutting down. */
const STARTS_WORK: ReadonlySet<Route["kind"]> = new Set(["infer", "generate", "generate_stream", "load", "unload"]);

/**
 * The KServe v2 REST frontend over one {@link InferenceServer}. Routing follows Triton's
 * full-match regexes on the raw path (the query string is ignored); each route checks its
 * restricted-API category, then its method, then runs. Every failure is answered
 * `{"error":"<message>"}` with the error's status; nothing a client sends makes the handler
 * reject. Once shutdown has begun, inference and repository changes are refused with 503
 * `Server not ready` (the other routes still answer) and every answer closes its connection.
 */
export function createRestFrontend(server: InferenceServer, options: HttpFrontendOptions = {}): HttpService {
  const limit = options.maxInputSize ?? DEFAULT_MAX_INPUT_SIZE;
  const bodyLimit = Math.max(limit, options.maxBodySize ?? DEFAULT_MAX_BODY_SIZE);
  const load = options.load;
  const handle: HttpHandler = (request) => {
    try {
      const route = matchRoute(request.target);
      if (!route) throw new InferenceError("NOT_FOUND_ROUTE");
      const rule = options.restricted?.find((r) => r.apis.includes(categoryOf(route)));
      if (rule && request.header(rule.key.toLowerCase()) !== rule.value) {
        throw new InferenceError("RESTRICTED_HTTP", { header: rule.key });
      }
      if (!methodsOf(route).includes(request.method)) throw new InferenceError("METHOD_NOT_ALLOWED");
      // Draining: a request that arrives on a kept-alive connection is answered, but starts no work.
      if (!server.accepting && STARTS_WORK.has(route.kind)) throw new InferenceError("SERVER_NOT_READY");
      const ctx: Context = load ? { server, request, limit, bodyLimit, load } : { server, request, limit, bodyLimit };
      return dispatch(ctx, route).catch((error: unknown) => failure(server, request, error));
    } catch (error) {
      return Promise.resolve(failure(server, request, error));
    }
  };
  // Inference within the body limit; none when an `--http-restricted-api` rule covers inference
  // (its header is for Node's server to read).
  const lean: LeanChoice = (head) => head.contentLength <= bodyLimit && matchRoute(head.target)?.kind === "infer";
  const restricted = options.restricted?.some((rule) => rule.apis.includes("inference"));
  // Once shutdown has begun every answer closes its connection, so that kept-alive ones drain.
  const closing = () => !server.accepting;
  return restricted ? { handle, closing } : { handle, lean, closing };
}

/** The route's answer; what a route runs before its first `await` runs here, synchronously. */
function dispatch(ctx: Context, route: Route): Promise<HttpAnswer> {
  switch (route.kind) {
    case "infer":
      return handleInfer(ctx, route.model, route.version);
    case "generate":
      return handleGenerate(ctx, route.model, route.version, false);
    case "generate_stream":
      return handleGenerate(ctx, route.model, route.version, true);
    case "health":
      return Promise.resolve(handleHealth(ctx, route.which));
    case "server-metadata":
      return Promise.resolve(handleServerMetadata(ctx));
    case "model-metadata":
      return Promise.resolve(handleModelMetadata(ctx, route.model, route.version));
    case "ready":
      return handleModelReady(ctx, route.model, route.version);
    case "config":
      return Promise.resolve(handleModelConfig(ctx, route.model, route.version));
    case "stats":
      return Promise.resolve(handleStatistics(ctx, route.model, route.version));
    case "all-stats":
      return Promise.resolve(handleStatistics(ctx, "", ""));
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
 * Triton's answer to a failure (`{"error":"<message>"}` and its status). An {@link InferenceError}
 * is answered as it is; anything else is a bug, logged and answered 500 without its JavaScript text
 * (see {@link answerableFailure}). A client that is gone is answered nothing anyone reads, quietly.
 */
function failure(server: InferenceServer, request: HttpRequest, error: unknown): HttpAnswer {
  if (error instanceof ClientGone) return { status: 400, headers: {}, parts: [] };
  const { failed, logged } = answerableFailure(error);
  if (logged !== undefined) server.log.error(`HTTP ${request.method} ${request.target}: ${logged}`);
  return json(
    httpStatus(failed),
    { error: failed.message },
    failed.id === "UNSUPPORTED_COMPRESSION" ? { "Accept-Encoding": ACCEPTED_ENCODINGS } : {},
  );
}

// The route table: Triton's full-match regexes over the raw path (no URL decoding, query string
// dropped), tried in Triton's order (`HTTPAPIServer::Handle`, PROTOCOL.md §1.1).

/** A restricted-API category (`--http-restricted-api`). */
export type Category =
  | "health"
  | "metadata"
  | "inference"
  | "shared-memory"
  | "model-config"
  | "model-repository"
  | "statistics"
  | "trace"
  | "logging";

export type ModelAction = "infer" | "generate" | "generate_stream" | "ready" | "config" | "stats" | "trace/setting";

/** A matched route and what its path carries. */
export type Route =
  | { kind: "health"; which: "live" | "ready" }
  | { kind: "server-metadata" }
  | { kind: "model-metadata"; model: string; version: string }
  | { kind: ModelAction; model: string; version: string }
  | { kind: "all-stats" }
  | { kind: "logging" }
  | { kind: "trace" }
  | { kind: "index"; repository: string }
  | { kind: "load" | "unload"; repository: string; model: string }
  | { kind: "shm"; memory: "system" | "cuda"; region: string; action: "status" | "register" | "unregister" };

const MODEL =
  /^\/v2\/models\/([^/]+)(?:\/versions\/([0-9]+))?(?:\/(infer|generate|generate_stream|ready|config|stats|trace\/setting))?$/;
const SERVER = /^\/v2(?:\/health\/(live|ready))?$/;
const REPOSITORY = /^\/v2\/repository(?:\/([^/]+))?\/(index|models\/([^/]+)\/(load|unload))$/;
const SYSTEM_SHM = /^\/v2\/systemsharedmemory(?:\/region\/([^/]+))?\/(status|register|unregister)$/;
const CUDA_SHM = /^\/v2\/cudasharedmemory(?:\/region\/([^/]+))?\/(status|register|unregister)$/;

/** The route for a request target, or undefined (404 `Not Found`). */
export function matchRoute(target: string): Route | undefined {
  // The lean path's choice and the handler match the same target one after the other.
  if (target === lastTarget) return lastRoute;
  lastRoute = matchTarget(target);
  lastTarget = target;
  return lastRoute;
}

let lastTarget: string | undefined;
let lastRoute: Route | undefined;

function matchTarget(target: string): Route | undefined {
  const query = target.indexOf("?");
  const path = query === -1 ? target : target.slice(0, query);
  if (path === "/v2/models/stats") return { kind: "all-stats" };
  if (path === "/v2/logging") return { kind: "logging" };
  let m = MODEL.exec(path);
  if (m) {
    const model = m[1] as string;
    const version = m[2] ?? "";
    const action = m[3] as ModelAction | undefined;
    if (action === undefined) return { kind: "model-metadata", model, version };
    // A versioned trace path is not a route.
    if (action !== "trace/setting" || version === "") return { kind: action, model, version };
  }
  m = SERVER.exec(path);
  if (m) return m[1] ? { kind: "health", which: m[1] as "live" | "ready" } : { kind: "server-metadata" };
  for (const [regex, memory] of [
    [SYSTEM_SHM, "system"],
    [CUDA_SHM, "cuda"],
  ] as const) {
    m = regex.exec(path);
    if (m) return { kind: "shm", memory, region: m[1] ?? "", action: m[2] as "status" | "register" | "unregister" };
  }
  m = REPOSITORY.exec(path);
  if (m) {
    const repository = m[1] ?? "";
    if (m[2] === "index") return { kind: "index", repository };
    return { kind: m[4] as "load" | "unload", repository, model: m[3] as string };
  }
  if (path === "/v2/trace/setting") return { kind: "trace" };
  return undefined;
}

/** The restricted-API category of a route (Triton's grouping). */
export function categoryOf(route: Route): Category {
  switch (route.kind) {
    case "health":
    case "ready":
      return "health";
    case "server-metadata":
    case "model-metadata":
      return "metadata";
    case "infer":
    case "generate":
    case "generate_stream":
      return "inference";
    case "config":
      return "model-config";
    case "stats":
    case "all-stats":
      return "statistics";
    case "index":
    case "load":
    case "unload":
      return "model-repository";
    case "shm":
      return "shared-memory";
    case "trace":
    case "trace/setting":
      return "trace";
    case "logging":
      return "logging";
  }
}

/** The methods a route answers; any other gets 405 `Method Not Allowed`. */
export function methodsOf(route: Route): readonly string[] {
  switch (route.kind) {
    case "infer":
    case "generate":
    case "generate_stream":
    case "index":
    case "load":
    case "unload":
      return POST;
    case "trace":
    case "trace/setting":
    case "logging":
      return GET_POST;
    case "shm":
      return route.action === "status" ? GET : POST;
    default:
      return GET;
  }
}

const GET = ["GET"];
const POST = ["POST"];
const GET_POST = ["GET", "POST"];
