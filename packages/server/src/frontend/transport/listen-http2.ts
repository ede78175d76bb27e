import {
  createServer as createHttp2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
  type ServerOptions,
} from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { bind, defaultMaxConnections, type Listener, limitConnections, tooManyConnections } from "./listener.js";
import { requestTurns } from "./turn-budget.js";

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

/** How long {@link listenHttp2} keeps connections, all in ms. */
export interface Http2ConnectionOptions {
  /** Ping a connection this often (gRPC keepalive; default 7,200,000). */
  keepaliveTimeMs?: number;
  /** Close a connection whose ping is not answered within this (default 20,000). */
  keepaliveTimeoutMs?: number;
  /**
   * Close a connection that has had no open stream for this long (default 300,000; 0: never).
   * A stream open without traffic keeps its connection (a decoupled stream may be quiet for minutes).
   */
  idleTimeoutMs?: number;
  /**
   * Close a connection that has opened no stream this long after connecting (default 10,000,
   * or the idle limit when shorter): nothing sent, or only the preface and SETTINGS.
   */
  firstStreamTimeoutMs?: number;
  /**
   * Open connections the port holds (`--grpc-max-connections`); on one past it every call is
   * answered UNAVAILABLE and the connection closed. 0: no limit. Default: half the soft descriptor limit less 256.
   */
  maxConnections?: number;
}

/** {@link Http2ConnectionOptions}' defaults. */
export const DEFAULT_HTTP2_TIMEOUTS = {
  idleTimeoutMs: 300_000,
  firstStreamTimeoutMs: 10_000,
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
  connections: Http2ConnectionOptions = {},
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
      if (refuse(stream)) return;
      requestTurns.start(() => {
        if (stream.destroyed) return;
        if (!serveStream?.(stream, headers)) compat.emit("stream", stream, headers, flags, rawHeaders);
      });
    },
  );
  // Node's own listener, which makes the HTTP/2 session of a socket.
  const nodeConnection = server.listeners("connection") as ((socket: unknown) => void)[];
  const sessions = new Map<Http2Session, IdleWatch>();
  // The sockets under the sessions: a closed session only half-closes its socket and waits for
  // the peer to end it, so a shutdown's last resort cuts them.
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  const pingEvery = connections.keepaliveTimeMs ?? 7_200_000;
  const pingTimeout = connections.keepaliveTimeoutMs ?? 20_000;
  const { idleTimeoutMs, firstStreamTimeoutMs } = { ...DEFAULT_HTTP2_TIMEOUTS, ...connections };
  let refusing = false;
  const refused = new WeakSet<Http2Session>();
  server.on("session", (session) => {
    if (refusing) refused.add(session);
    session.setLocalWindowSize(HTTP2_LIMITS.connectionWindowBytes);
    const idle = closeWhenIdle(session, idleTimeoutMs, firstStreamTimeoutMs);
    sessions.set(session, idle);
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
      idle.stop();
      sessions.delete(session);
    });
  });
  const maxConnections = connections.maxConnections ?? defaultMaxConnections();
  // Past the limit a connection still gets its HTTP/2 session, so that a client learns why: its
  // calls are answered UNAVAILABLE (trailers only), and the connection is closed. Node makes the
  // session and emits `session` within its connection listener.
  limitConnections(server, maxConnections, (socket) => {
    refusing = true;
    try {
      for (const listener of nodeConnection) listener.call(server, socket);
    } finally {
      refusing = false;
    }
  });
  const refuse = (stream: ServerHttp2Stream): boolean => {
    if (stream.session === undefined || !refused.has(stream.session)) return false;
    stream.respond(
      {
        ":status": 200,
        "content-type": "application/grpc",
        "grpc-status": "14",
        // Printable ASCII without '%': the gRPC spec's percent-encoding leaves it as it is.
        "grpc-message": tooManyConnections(maxConnections),
      },
      { endStream: true },
    );
    stream.session?.close();
    return true;
  };
  await bind(server, host, port);
  return {
    address: server.address() as AddressInfo,
    close: (graceMs) =>
      new Promise((resolve) => {
        const force = setTimeout(() => {
          for (const session of sessions.keys()) session.destroy();
          for (const socket of sockets) socket.destroy();
        }, graceMs);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        // GOAWAY: streams already open finish, new ones go elsewhere; a connection with none
        // closes now, its socket too (Node 26 leaves the socket of a session destroyed before
        // its peer's SETTINGS open, and server.close() waited for it to the end of the grace).
        const busy = new Set<string>();
        for (const [session, idle] of sessions) {
          if (idle.busy()) {
            busy.add(peerOf(session.socket));
            session.close();
          } else session.destroy();
        }
        for (const socket of sockets) if (!busy.has(peerOf(socket))) socket.destroy();
      }),
  };
}

/** A connection's peer address: the same for a socket and for its session's (a proxy of it). */
function peerOf(socket: { remoteAddress?: string | undefined; remotePort?: number | undefined }): string {
  return `${socket.remoteAddress}:${socket.remotePort}`;
}

/** A connection's streams, as {@link closeWhenIdle} follows them. */
interface IdleWatch {
  /** Whether a stream is open. */
  busy(): boolean;
  stop(): void;
}

/**
 * Closes `session` when it has had no open stream for `idleMs` (0: never), or has opened none
 * `firstStreamMs` after connecting (or `idleMs`, when shorter). Only open streams count, not
 * frames: Node's session timeout would cut a stream that is quiet but running, and pings would
 * keep an idle connection. The timer is not moved at each stream: when it fires on a connection
 * that has been busy since, it is set again for what is left. `destroy` sends GOAWAY (no error,
 * so a client retries on a new connection) and closes the socket; `close` would only half-close
 * it and wait for the peer, which a hostile one never ends.
 */
function closeWhenIdle(session: Http2Session, idleMs: number, firstStreamMs: number): IdleWatch {
  let open = 0;
  let opened = false;
  let idleSince = 0;
  let timer: NodeJS.Timeout | undefined;
  const arm = (ms: number) => {
    timer = setTimeout(check, ms);
    timer.unref();
  };
  const check = () => {
    timer = undefined;
    if (open > 0) return;
    if (!opened) return session.destroy();
    if (idleMs === 0) return;
    const left = idleMs - (performance.now() - idleSince);
    if (left > 0) arm(left);
    else session.destroy();
  };
  const ended = () => {
    open -= 1;
    if (open > 0 || idleMs === 0) return;
    idleSince = performance.now();
    if (timer === undefined) arm(idleMs);
  };
  session.on("stream", (stream: ServerHttp2Stream) => {
    open += 1;
    opened = true;
    stream.on("close", ended);
  });
  arm(idleMs > 0 ? Math.min(idleMs, firstStreamMs) : firstStreamMs);
  return { busy: () => open > 0, stop: () => clearTimeout(timer) };
}
