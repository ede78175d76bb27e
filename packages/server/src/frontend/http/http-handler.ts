import type { IncomingMessage, ServerResponse } from "node:http";
import type { InferenceServer } from "../../core/inference-server.js";
import { replyEmpty, replyError, replyJson } from "./reply.js";

/** REST frontend options (tritonserver's `--http-*` flags). */
export interface HttpFrontendOptions {
  /** `--http-max-input-size`: the largest request body, decompressed (default 64 MiB). */
  maxInputSize?: number;
  /** `--http-restricted-api=<apis>:<key>=<value>`: the header `<key>` must carry `<value>`. */
  restricted?: readonly { apis: readonly string[]; key: string; value: string }[];
}

/** Triton's server-route regex, matched against the path without its query string. */
const SERVER_ROUTE = /^\/v2(?:\/health\/(live|ready))?$/;

/**
 * The KServe v2 REST frontend: a Node `request` listener over one {@link InferenceServer}.
 * Routing follows Triton's full-match regexes on the raw path; the query string is ignored.
 */
export function createHttpHandler(
  server: InferenceServer,
  _options: HttpFrontendOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const url = req.url ?? "/";
    const query = url.indexOf("?");
    const path = query === -1 ? url : url.slice(0, query);
    const match = SERVER_ROUTE.exec(path);
    if (!match) {
      replyError(res, 404, "Not Found");
      return;
    }
    if (req.method !== "GET") {
      replyError(res, 405, "Method Not Allowed");
      return;
    }
    switch (match[1]) {
      case "live":
        replyEmpty(res, server.isLive() ? 200 : 400);
        return;
      case "ready":
        replyEmpty(res, server.isReady() ? 200 : 400);
        return;
      default:
        replyJson(res, 200, server.metadata());
    }
  };
}
