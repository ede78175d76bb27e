/**
 * The REST route table: Triton's full-match regexes over the raw path (no URL decoding, query
 * string dropped), tried in Triton's order (`HTTPAPIServer::Handle`, PROTOCOL.md §1.1).
 */

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
