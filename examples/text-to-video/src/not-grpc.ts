// An address that does not speak gRPC: the client's HTTP/2 session fails before any call reaches
// a server ("Protocol error"). Most often it is the server's HTTP/REST port (8000) given to -u:
// a plain HTTP/1.1 request there tells.
import type { ConnectError } from "@connectrpc/connect";
import { LocalError } from "./local-error.js";

/** Node's errors for an HTTP/2 session that the peer broke off or never spoke. */
const SESSION_ERRORS = new Set(["ERR_HTTP2_ERROR", "ERR_HTTP2_SESSION_ERROR", "ERR_HTTP2_INVALID_SESSION"]);

/** Whether a failed call failed because the peer is not an HTTP/2 (gRPC) server. */
export function isNotGrpc(error: ConnectError): boolean {
  const code = (error.cause as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && SESSION_ERRORS.has(code);
}

/**
 * The local error for `url` (`-u`) that does not speak gRPC: asks it `GET /v2/health/live` over
 * HTTP/1.1 (up to 2 s) to say whether it is an HTTP server, such as the server's REST port.
 */
export async function notGrpcError(error: ConnectError, url: string, baseUrl: string): Promise<LocalError> {
  let answer: string | undefined;
  try {
    const response = await fetch(new URL("/v2/health/live", baseUrl), { signal: AbortSignal.timeout(2000) });
    answer = `HTTP/1.1 (status ${response.status})`;
    await response.body?.cancel();
  } catch {
    answer = undefined;
  }
  const hint = "galley-video speaks gRPC: give -u the server's gRPC port (galley serve --grpc-port, default 8001)";
  return new LocalError(
    answer
      ? `${url} is not a gRPC port: it answers ${answer}, as the server's HTTP and metrics ports do; ${hint}`
      : `${url} is not a gRPC port (${error.rawMessage}); ${hint}`,
    1,
  );
}
