import {
  createServer as createHttp1Server,
  Server as Http1Server,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import {
  createServer as createHttp2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
  type ServerOptions,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { withTritonParseFailure } from "./grpc/connect-parse-failure.js";
import { rewriteHeaders } from "./grpc/rewrite-headers.js";
import { answerClientErrors } from "./http1-client-errors.js";
import { type LeanHandler, serveLean } from "./http1-lean.js";

/** One bound listener. */
export interface Listener {
  readonly address: AddressInfo;
  /** Stop accepting, let in-flight requests finish for up to `graceMs`, then cut what is left. */
  close(graceMs: number): Promise<void>;
}

/**
 * Time limits of an HTTP/1.1 listener (`galley serve --http-*-timeout-secs`). Triton's HTTP server
 * has no such flags; without limits a client that sends a request slowly, or never finishes it,
 * holds its connection (and a file descriptor) for ever.
 */
export interface Http1Timeouts {
  /**
   * The request line and headers must arrive within this many ms of their first byte (Node's
   * `headersTimeout`; the client gets 408 and the connection closes). 0: no limit. Default 60 s.
   */
  headerTimeoutMs?: number;
  /**
   * A connection that sends nothing for this many ms while it opens or sends a request body is
   * closed. The limit applies only while the server waits for the client: not while it computes
   * the answer nor while it writes it. 0: no limit. Default 60 s.
   */
  idleTimeoutMs?: number;
  /** An idle keep-alive connection is closed after this many ms (Node's `keepAliveTimeout`). 0: never. Default 5 s. */
  keepAliveTimeoutMs?: number;
}

/** The defaults of {@link Http1Timeouts}. */
export const DEFAULT_HTTP1_TIMEOUTS: Required<Http1Timeouts> = {
  headerTimeoutMs: 60_000,
  idleTimeoutMs: 60_000,
  keepAliveTimeoutMs: 5_000,
};

/**
 * An HTTP/1.1 listener (the KServe REST frontend; Triton's is HTTP/1.1 too). A whole request may
 * take as long as it needs (a large upload can be slow) as long as bytes keep flowing; see
 * {@link Http1Timeouts} for the limits.
 *
 * `close(graceMs)` drains: the port stops accepting, requests already received are answered,
 * and every response from then on carries `Connection: close`. Idle keep-alive connections stay
 * open while anything is in flight, so that a request a client has already sent on one is
 * answered (the handler refuses new work with 503) rather than reset; once nothing is in flight
 * they are closed. What is left after `graceMs` is cut.
 *
 * With `lean`, connections start on the lean path (`http1-lean.ts`), which serves the plainest
 * inference requests itself and hands a connection to `handler` at its first other request.
 */
export async function listenHttp1(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  host: string,
  port: number,
  timeouts: Http1Timeouts = {},
  lean?: LeanHandler,
): Promise<Listener> {
  const { headerTimeoutMs, idleTimeoutMs, keepAliveTimeoutMs } = { ...DEFAULT_HTTP1_TIMEOUTS, ...timeouts };
  let draining = false;
  let active = 0;
  let leanConnections: { closeIdle(): void; closeAll(): void } | undefined;
  const closeIdle = () => {
    Http1Server.prototype.closeIdleConnections.call(server);
    leanConnections?.closeIdle();
  };
  const server = createHttp1Server(
    {
      // No limit on the whole request: a large upload may take long, as in Triton.
      requestTimeout: 0,
      headersTimeout: headerTimeoutMs,
      keepAliveTimeout: keepAliveTimeoutMs,
      // Node checks the header deadline on this period (30 s by default): often enough to keep it.
      ...(headerTimeoutMs > 0
        ? { connectionsCheckingInterval: Math.min(1000, Math.max(10, Math.floor(headerTimeoutMs / 4))) }
        : {}),
    },
    (req, res) => {
      active++;
      res.once("close", () => {
        active--;
        if (draining && active === 0) closeIdle();
      });
      if (draining) res.setHeader("Connection", "close");
      if (idleTimeoutMs > 0) {
        // Node resets a socket's timer on every byte: it trips only when the body stops flowing.
        const socket = req.socket;
        socket.setTimeout(idleTimeoutMs);
        // Once the response is done Node has set the keep-alive timer; leave that one alone.
        req.once("end", () => {
          if (!res.writableFinished) socket.setTimeout(0);
        });
      }
      handler(req, res);
    },
  );
  answerClientErrors(server);
  if (lean) {
    const work = {
      accepting: () => !draining,
      started: () => {
        active++;
      },
      finished: () => {
        active--;
        if (draining && active === 0) closeIdle();
      },
    };
    leanConnections = serveLean(server, lean, work, { idleMs: idleTimeoutMs, keepAliveMs: keepAliveTimeoutMs });
  }
  // A connection that opens and sends nothing; from its first request on, the handler above sets the timer.
  if (idleTimeoutMs > 0) server.setTimeout(idleTimeoutMs);
  await bind(server, host, port);
  return {
    address: server.address() as AddressInfo,
    close: (graceMs) =>
      new Promise((resolve) => {
        draining = true;
        const force = setTimeout(() => {
          server.closeAllConnections();
          leanConnections?.closeAll();
        }, graceMs);
        // http.Server#close destroys idle keep-alive connections at once, resetting requests that
        // are already on their way on them; they are closed by closeIdle() once the drain is done.
        server.closeIdleConnections = () => undefined;
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        Reflect.deleteProperty(server, "closeIdleConnections");
        if (active === 0) closeIdle();
      }),
  };
}

/**
 * HTTP/2 flow control and memory for big tensors. Node's defaults (64 KiB windows, 10 MB of
 * session memory) hold a 48 MiB message to a few hundred MB/s on loopback and make nghttp2 refuse
 * new streams (ENHANCE_YOUR_CALM) while a large response is queued. A peer can push at most a
 * window of unread bytes, and every message is read whole anyway (up to Triton's INT32_MAX), so
 * these bound buffering without limiting what can be sent.
 */
export const HTTP2_LIMITS = {
  /** Per stream: how much a client may send before the server has read it. */
  streamWindowBytes: 16 * 1024 * 1024,
  /** Per connection, across its streams. */
  connectionWindowBytes: 128 * 1024 * 1024,
  /** Per connection: frames queued in and out before new streams are refused (MiB, as Node counts it). */
  sessionMemoryMiB: 4096,
  /** The largest DATA frame a client may send (HTTP/2's maximum): fewer, larger reads for big tensors. */
  maxFrameBytes: 16 * 1024 * 1024 - 1,
} as const;

/**
 * Serves a stream itself (returning true), or leaves it (false) to the request handler of
 * {@link listenHttp2}.
 */
export type Http2StreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean;

/**
 * A cleartext HTTP/2 listener (gRPC, gRPC-Web and Connect on one port). Each stream goes first to
 * `serveStream`, when given; the streams it leaves get Node's compatibility request and response
 * and go to `handler`. Those objects cost several µs a call (bench/README.md), so the hot RPC
 * skips them.
 */
export async function listenHttp2(
  handler: (req: Http2ServerRequest, res: Http2ServerResponse) => void,
  host: string,
  port: number,
  keepalive: { keepaliveTimeMs?: number; keepaliveTimeoutMs?: number } = {},
  serveStream?: Http2StreamHandler,
): Promise<Listener> {
  const options: ServerOptions = {
    maxSessionMemory: HTTP2_LIMITS.sessionMemoryMiB,
    settings: { initialWindowSize: HTTP2_LIMITS.streamWindowBytes, maxFrameSize: HTTP2_LIMITS.maxFrameBytes },
  };
  // Node makes the compatibility objects in a 'stream' listener it adds with the first 'request'
  // listener, for every stream. The bound server has none; a server that never listens holds the
  // handler, and is given the streams left to it, to make them the Node way.
  const server = createHttp2Server(options);
  const compat = createHttp2Server(options, handler);
  server.on(
    "stream",
    (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
      if (!serveStream?.(stream, headers)) compat.emit("stream", stream, headers, flags, rawHeaders);
    },
  );
  const sessions = new Set<Http2Session>();
  const pingEvery = keepalive.keepaliveTimeMs ?? 7_200_000;
  const pingTimeout = keepalive.keepaliveTimeoutMs ?? 20_000;
  server.on("session", (session) => {
    sessions.add(session);
    session.setLocalWindowSize(HTTP2_LIMITS.connectionWindowBytes);
    // gRPC keepalive: ping the client; a connection that does not answer in time is closed.
    const timer = setInterval(() => {
      const deadline = setTimeout(() => session.destroy(), pingTimeout);
      deadline.unref();
      const sent = session.ping((error) => {
        clearTimeout(deadline);
        if (error) session.destroy();
      });
      if (!sent) clearTimeout(deadline);
    }, pingEvery);
    timer.unref();
    session.once("close", () => {
      clearInterval(timer);
      sessions.delete(session);
    });
  });
  await bind(server, host, port);
  return {
    address: server.address() as AddressInfo,
    close: (graceMs) =>
      new Promise((resolve) => {
        const force = setTimeout(() => {
          for (const session of sessions) session.destroy();
        }, graceMs);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        // GOAWAY: streams already open finish, new ones go elsewhere.
        for (const session of sessions) session.close();
      }),
  };
}

function bind(server: import("node:net").Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/**
 * A response handed to connect-node, wrapped so that its `grpc-message` is written as the gRPC
 * spec writes it and its parse failures are answered as Triton answers them. The lean `ModelInfer`
 * path writes its own headers and takes neither wrapper (each is several functions per request).
 */
export function connectResponse(req: Http2ServerRequest, res: Http2ServerResponse): Http2ServerResponse {
  return withTritonParseFailure(req, withSpecGrpcMessage(res));
}

/**
 * Connect writes `grpc-message` with `encodeURIComponent`, which also escapes `:`, `/`, `,`, `=`;
 * the gRPC spec leaves printable ASCII other than `%` as it is, and some clients (grpc-js) only
 * undo the spec's escaping, showing `%3A` in Triton's messages. Rewrite the header the way the spec
 * (and Triton's C++ server) writes it.
 */
function withSpecGrpcMessage(res: Http2ServerResponse): Http2ServerResponse {
  return rewriteHeaders(res, (record) => {
    const message = record["grpc-message"];
    if (typeof message === "string") record["grpc-message"] = specPercentEncode(safeDecode(message));
  });
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** gRPC's percent-encoding: every UTF-8 byte outside 0x20–0x7E, and `%`, as `%XX`. */
export function specPercentEncode(text: string): string {
  let out = "";
  for (const byte of Buffer.from(text, "utf8")) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}
