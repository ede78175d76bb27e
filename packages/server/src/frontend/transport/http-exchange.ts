// One HTTP/1 request and its answer as a protocol sees them, whichever path read the request: the
// lean path (`http1-lean.ts`) or Node's server (`http1-node.ts`). A protocol is one function from
// the one to the other (connect-es's universal handler is the model); the paths only carry bytes.
import type { Trace } from "../../base/trace.js";
import type { Body } from "./body-receiver.js";
import type { LeanChoice } from "./lean-head.js";

export type { Body };

/** A content coding a body may arrive in (the request's `Content-Encoding`, already checked). */
export type BodyEncoding = "identity" | "gzip" | "deflate";

/** How a request body is received. */
export interface BodyOptions {
  /** The largest body accepted, as received (and, unless `decompressedLimit` says otherwise, decompressed). */
  limit: number;
  /** What a body past `limit` fails with (default INPUT_SIZE_EXCEEDED: the body is one JSON document). */
  limitError?: "INPUT_SIZE_EXCEEDED" | "BODY_TOO_LARGE";
  /** The largest decompressed body, when it differs from `limit`: past it, DECOMPRESSED_TOO_LARGE. */
  decompressedLimit?: number;
  encoding: BodyEncoding;
  /**
   * Free bytes to leave before the body in its buffer, so the caller can place it: the binary
   * tensor data after a JSON header of known length then starts 8-byte aligned, or a raw BYTES
   * input gets room for its length prefix.
   */
  offset?: number;
}

/** One request. */
export interface HttpRequest {
  readonly method: string;
  /** The request target as sent (path and query, not decoded). */
  readonly target: string;
  /** A header's value (`name` in lower case); repeated custom headers are joined with `, `. */
  header(name: string): string | undefined;
  /**
   * Receive the body, once. A handler that knows where the body goes asks before its first
   * `await`: the lean path then reads it straight into place.
   *
   * @throws the receiving path's failure: the limits' errors and NOTHING_TO_DECOMPRESS as
   * `InferenceError`s, {@link ClientGone} when the client went away first.
   */
  body(options: BodyOptions): Promise<Body>;
  /** Aborts when the client goes away before the answer has left. */
  readonly signal: AbortSignal;
}

/** The answer to one request. `Content-Length`, `Date` and `Connection` are the path's to write. */
export interface HttpAnswer {
  status: number;
  headers: Readonly<Record<string, string>>;
  /** The whole body, written in order without being joined. */
  parts?: readonly Uint8Array[];
  /**
   * Or a body written as it comes (chunked): each chunk as soon as the socket takes it. The path
   * reads the stream to its end even once the client has gone, so whatever produces it ends.
   */
  stream?: AsyncIterable<Uint8Array>;
  /**
   * With `stream`: when it aborts, the connection is destroyed at once (a stream whose client
   * stopped reading, so that its buffered chunks are freed instead of waiting for a drain).
   */
  drop?: AbortSignal;
  /** A trace to record `HTTP_SEND_START` and `HTTP_SEND_END` in, and end once the answer has left. */
  trace?: Trace;
}

/** A protocol over HTTP/1: it answers every request, failures included, and never rejects. */
export type HttpHandler = (request: HttpRequest) => Promise<HttpAnswer>;

/** A protocol as an HTTP/1 listener serves it. */
export interface HttpService {
  handle: HttpHandler;
  /** The requests the lean path may read; without it, Node's server reads every request. */
  lean?: LeanChoice;
  /** True once the server has begun shutting down: every answer from then on closes its connection. */
  closing?: () => boolean;
}

/** The client went away before its request body arrived; there is nobody to answer. */
export class ClientGone extends Error {
  constructor() {
    super("the client closed the connection");
  }
}
