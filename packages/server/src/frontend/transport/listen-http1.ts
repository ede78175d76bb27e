import { createServer as createHttp1Server, Server as Http1Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { HttpService } from "./http-exchange.js";
import { answerClientErrors } from "./http1-client-errors.js";
import { serveLean } from "./http1-lean.js";
import { nodeRequestListener } from "./http1-node.js";
import {
  answerAndClose,
  bind,
  defaultMaxConnections,
  type Listener,
  limitConnections,
  tooManyConnections,
} from "./listener.js";
import { requestTurns } from "./turn-budget.js";

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
  /**
   * Open connections the port holds (`--http-max-connections`); one past it is answered 503 and
   * closed. 0: no limit. Default: half the soft descriptor limit less 256.
   */
  maxConnections?: number;
}

/** The defaults of {@link Http1Timeouts}. */
export const DEFAULT_HTTP1_TIMEOUTS: Required<Omit<Http1Timeouts, "maxConnections">> = {
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
 * Every request is answered by `service.handle`, read by one of two paths: this listener is the one
 * place that chooses. With `service.lean`, connections start on the lean path (`http1-lean.ts`),
 * which reads the plainest heads itself and serves those `lean` chooses; at a connection's first
 * other request it hands the connection to Node's server (`http1-node.ts`) for good.
 */
export async function listenHttp1(
  service: HttpService,
  host: string,
  port: number,
  timeouts: Http1Timeouts = {},
): Promise<Listener> {
  const { handle: handler, lean } = service;
  const serviceClosing = service.closing;
  const { headerTimeoutMs, idleTimeoutMs, keepAliveTimeoutMs } = { ...DEFAULT_HTTP1_TIMEOUTS, ...timeouts };
  let draining = false;
  let active = 0;
  let leanConnections: { closeIdle(): void; closeAll(): void } | undefined;
  const closeIdle = () => {
    Http1Server.prototype.closeIdleConnections.call(server);
    leanConnections?.closeIdle();
  };
  const closing = serviceClosing ? () => draining || serviceClosing() : () => draining;
  const serveNode = nodeRequestListener(handler, closing);
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
      if (idleTimeoutMs > 0) {
        // Node resets a socket's timer on every byte: it trips only when the body stops flowing.
        const socket = req.socket;
        socket.setTimeout(idleTimeoutMs);
        // Once the response is done Node has set the keep-alive timer; leave that one alone.
        req.once("end", () => {
          if (!res.writableFinished) socket.setTimeout(0);
        });
      }
      requestTurns.start(() => serveNode(req, res));
    },
  );
  const clientErrors = answerClientErrors(server);
  if (lean) {
    const work = {
      accepting: () => !closing(),
      started: () => {
        active++;
      },
      finished: () => {
        active--;
        if (draining && active === 0) closeIdle();
      },
    };
    leanConnections = serveLean(
      server,
      handler,
      lean,
      work,
      { idleMs: idleTimeoutMs, keepAliveMs: keepAliveTimeoutMs },
      clientErrors,
    );
  }
  const maxConnections = timeouts.maxConnections ?? defaultMaxConnections();
  limitConnections(server, maxConnections, (socket) => {
    const body = JSON.stringify({ error: tooManyConnections(maxConnections) });
    answerAndClose(
      socket,
      `HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
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
