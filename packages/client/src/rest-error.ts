// REST failures as ConnectErrors with the codes the gRPC client gives for the same failures: one
// place that translates fetch's errors (undici's `TypeError: fetch failed` and its causes, abort
// and timeout reasons) and one table from HTTP status to code.
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The code of an HTTP status: the inverse of the server's table (Triton's `HttpCodeFromError`;
 * Galley's `docs/reference/errors.md`), so a REST error carries the code the same failure has over
 * gRPC. Where a status stands for several codes (400: INVALID_ARG, ALREADY_EXISTS, CANCELLED,
 * UNKNOWN) the common one is taken. Statuses the server never sends (a proxy's) follow gRPC's
 * HTTP-to-code mapping.
 */
const STATUS_CODES: Record<number, Code> = {
  400: Code.InvalidArgument,
  401: Code.Unauthenticated,
  // Triton's restricted APIs: UNAVAILABLE on both protocols.
  403: Code.Unavailable,
  404: Code.NotFound,
  // Galley answers a wrong method as INVALID_ARG; Triton's HTTP server does the same.
  405: Code.InvalidArgument,
  408: Code.DeadlineExceeded,
  413: Code.ResourceExhausted,
  429: Code.Unavailable,
  500: Code.Internal,
  501: Code.Unimplemented,
  502: Code.Unavailable,
  503: Code.Unavailable,
  504: Code.DeadlineExceeded,
};

/** The gRPC code an HTTP status maps to (UNKNOWN for a status outside the table). */
export function codeFromHttpStatus(status: number): Code {
  return STATUS_CODES[status] ?? Code.Unknown;
}

/** The request a failure belongs to, for its message. */
export interface RestCall {
  method: string;
  url: string;
  /** The call's deadline signal and its length, if it has one. */
  deadline?: AbortSignal | undefined;
  timeoutMs?: number | undefined;
}

/**
 * A reply with an error status as a ConnectError: the server's `{"error": ...}` text as it is
 * (Triton's clients match on it), the code from {@link codeFromHttpStatus}, the reply's headers as
 * `metadata`.
 */
export function errorFromReply(status: number, message: string, headers?: Headers): ConnectError {
  return new ConnectError(message, codeFromHttpStatus(status), headers);
}

/**
 * Any failure of a REST call (fetch's, reading the body, an abort) as a ConnectError that names
 * the request, keeping the original as `cause`:
 * - the call's deadline passed: DEADLINE_EXCEEDED;
 * - the caller's signal aborted: CANCELED (a ConnectError reason is kept as it is);
 * - refused, reset or unresolvable connections and other network failures: UNAVAILABLE;
 * - undici's own header and body timeouts: DEADLINE_EXCEEDED;
 * - anything else (a reply that is not JSON, say): INTERNAL.
 */
export function restErrorFrom(reason: unknown, call: RestCall): ConnectError {
  if (reason instanceof ConnectError) return reason;
  const where = `${call.method} ${call.url}`;
  if (call.deadline?.aborted && (reason === call.deadline.reason || isNamed(reason, "TimeoutError"))) {
    return new ConnectError(
      `${where}: the operation timed out after ${call.timeoutMs} ms`,
      Code.DeadlineExceeded,
      undefined,
      undefined,
      reason,
    );
  }
  if (isNamed(reason, "AbortError") || isNamed(reason, "TimeoutError")) {
    return new ConnectError(`${where}: ${(reason as Error).message}`, Code.Canceled, undefined, undefined, reason);
  }
  const errors = chain(reason);
  const codes = errors.map((e) => (e as { code?: unknown }).code);
  const detail = errors.length > 1 ? (errors[errors.length - 1] as Error).message : messageOf(reason);
  if (codes.includes("ECONNREFUSED")) {
    return new ConnectError(`${where}: connection refused (${detail})`, Code.Unavailable, undefined, undefined, reason);
  }
  if (codes.some((c) => c === "UND_ERR_HEADERS_TIMEOUT" || c === "UND_ERR_BODY_TIMEOUT")) {
    return new ConnectError(`${where}: ${detail}`, Code.DeadlineExceeded, undefined, undefined, reason);
  }
  // undici reports every network failure as a TypeError ("fetch failed", "terminated") whose
  // cause is the socket's or DNS's error.
  const network = reason instanceof TypeError && errors.length > 1;
  return new ConnectError(
    `${where}: ${detail === messageOf(reason) ? detail : `${messageOf(reason)}: ${detail}`}`,
    network ? Code.Unavailable : Code.Internal,
    undefined,
    undefined,
    reason,
  );
}

function isNamed(reason: unknown, name: string): boolean {
  return reason instanceof Error && reason.name === name;
}

function messageOf(reason: unknown): string {
  return reason instanceof Error ? reason.message : String(reason);
}

/** The error, its causes, and the errors of an AggregateError among them (both address families refused). */
function chain(reason: unknown): unknown[] {
  const out: unknown[] = [];
  const queue = [reason];
  while (queue.length > 0) {
    const current = queue.shift();
    if (!(current instanceof Error) || out.includes(current)) continue;
    out.push(current);
    queue.push((current as { cause?: unknown }).cause);
    if (current instanceof AggregateError) queue.push(...current.errors);
  }
  return out;
}
