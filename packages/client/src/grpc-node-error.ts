// Node's errors and HTTP/2 reset codes as ConnectErrors, for the lean ModelInfer path: the same
// codes and texts connect-node gives for the same failures (its own mapping is not exported), so
// a caller sees one set of errors whichever path a call took.
import { constants, type IncomingHttpHeaders } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * A Node error (or any reason: an abort signal's too) as a ConnectError, keeping it as `cause`:
 * a ConnectError as it is, an AbortError or TimeoutError as CANCELED, refused or unresolvable
 * connections as UNAVAILABLE, reset streams as ABORTED, anything else as INTERNAL.
 */
export function connectErrorFromNode(reason: unknown): ConnectError {
  if (reason instanceof ConnectError) return reason;
  const codes = chain(reason).map((e) => (e as { code?: unknown }).code);
  let code = Code.Internal;
  if (codes.includes("ERR_STREAM_WRITE_AFTER_END")) code = Code.Aborted;
  else if (codes.some((c) => c === "ERR_STREAM_DESTROYED" || c === "ERR_HTTP2_INVALID_STREAM" || c === "ECONNRESET"))
    code = Code.Aborted;
  else if (codes.some((c) => c === "ETIMEDOUT" || c === "ENOTFOUND" || c === "EAI_AGAIN" || c === "ECONNREFUSED"))
    code = Code.Unavailable;
  const error = ConnectError.from(reason, code);
  if (error !== reason) error.cause = reason;
  return error;
}

/** The error an HTTP/2 stream reset with `rstCode` stands for, or undefined for NO_ERROR and STREAM_CLOSED. */
export function connectErrorFromResetCode(rstCode: number | undefined): ConnectError | undefined {
  const code = RESET_CODES[rstCode ?? constants.NGHTTP2_NO_ERROR];
  if (code === undefined) return undefined;
  const name = RESET_NAMES[rstCode as number];
  return new ConnectError(`http/2 stream closed with error code ${name} (0x${(rstCode as number).toString(16)})`, code);
}

/** Node's response headers or trailers as web Headers (for connect's own validation of an unusual response). */
export function webHeaders(...sources: (IncomingHttpHeaders | undefined)[]): Headers {
  const out = new Headers();
  for (const source of sources) {
    for (const [key, value] of Object.entries(source ?? {})) {
      if (key.startsWith(":") || value === undefined) continue;
      if (Array.isArray(value)) for (const v of value) out.append(key, v);
      else out.append(key, String(value));
    }
  }
  return out;
}

function chain(reason: unknown): unknown[] {
  const out: unknown[] = [];
  let current = reason;
  while (current instanceof Error && !out.includes(current)) {
    out.push(current);
    current = (current as { cause?: unknown }).cause;
  }
  return out;
}

const RESET_CODES: Record<number, Code> = {
  [constants.NGHTTP2_PROTOCOL_ERROR]: Code.Internal,
  [constants.NGHTTP2_INTERNAL_ERROR]: Code.Internal,
  [constants.NGHTTP2_FLOW_CONTROL_ERROR]: Code.Internal,
  [constants.NGHTTP2_SETTINGS_TIMEOUT]: Code.Internal,
  [constants.NGHTTP2_FRAME_SIZE_ERROR]: Code.Internal,
  [constants.NGHTTP2_COMPRESSION_ERROR]: Code.Internal,
  [constants.NGHTTP2_CONNECT_ERROR]: Code.Internal,
  [constants.NGHTTP2_REFUSED_STREAM]: Code.Unavailable,
  [constants.NGHTTP2_CANCEL]: Code.Canceled,
  [constants.NGHTTP2_ENHANCE_YOUR_CALM]: Code.ResourceExhausted,
  [constants.NGHTTP2_INADEQUATE_SECURITY]: Code.PermissionDenied,
  [constants.NGHTTP2_HTTP_1_1_REQUIRED]: Code.PermissionDenied,
};

const RESET_NAMES: Record<number, string> = {
  [constants.NGHTTP2_PROTOCOL_ERROR]: "PROTOCOL_ERROR",
  [constants.NGHTTP2_INTERNAL_ERROR]: "INTERNAL_ERROR",
  [constants.NGHTTP2_FLOW_CONTROL_ERROR]: "FLOW_CONTROL_ERROR",
  [constants.NGHTTP2_SETTINGS_TIMEOUT]: "SETTINGS_TIMEOUT",
  [constants.NGHTTP2_FRAME_SIZE_ERROR]: "FRAME_SIZE_ERROR",
  [constants.NGHTTP2_COMPRESSION_ERROR]: "COMPRESSION_ERROR",
  [constants.NGHTTP2_CONNECT_ERROR]: "CONNECT_ERROR",
  [constants.NGHTTP2_REFUSED_STREAM]: "REFUSED_STREAM",
  [constants.NGHTTP2_CANCEL]: "CANCEL",
  [constants.NGHTTP2_ENHANCE_YOUR_CALM]: "ENHANCE_YOUR_CALM",
  [constants.NGHTTP2_INADEQUATE_SECURITY]: "INADEQUATE_SECURITY",
  [constants.NGHTTP2_HTTP_1_1_REQUIRED]: "HTTP_1_1_REQUIRED",
};
