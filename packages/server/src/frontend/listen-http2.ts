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
import { bind, type Listener } from "./listener.js";

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
