import { createServer as createHttp1Server, type IncomingMessage, type ServerResponse } from "node:http";
import {
  createServer as createHttp2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
} from "node:http2";
import type { AddressInfo } from "node:net";

/** One bound listener. */
export interface Listener {
  readonly address: AddressInfo;
  /** Stop accepting, let in-flight requests finish for up to `graceMs`, then cut what is left. */
  close(graceMs: number): Promise<void>;
}

/** An HTTP/1.1 listener (the KServe REST frontend; Triton's is HTTP/1.1 too). */
export async function listenHttp1(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  host: string,
  port: number,
): Promise<Listener> {
  const server = createHttp1Server(handler);
  await bind(server, host, port);
  return {
    address: server.address() as AddressInfo,
    close: (graceMs) =>
      new Promise((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), graceMs);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}

/** A cleartext HTTP/2 listener (gRPC, gRPC-Web and Connect on one port). */
export async function listenHttp2(
  handler: (req: Http2ServerRequest, res: Http2ServerResponse) => void,
  host: string,
  port: number,
  keepalive: { keepaliveTimeMs?: number; keepaliveTimeoutMs?: number } = {},
): Promise<Listener> {
  const server = createHttp2Server(handler);
  const sessions = new Set<Http2Session>();
  const pingEvery = keepalive.keepaliveTimeMs ?? 7_200_000;
  const pingTimeout = keepalive.keepaliveTimeoutMs ?? 20_000;
  server.on("session", (session) => {
    sessions.add(session);
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
