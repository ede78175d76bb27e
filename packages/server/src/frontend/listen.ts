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
  // No request timeout: a large upload may take long, as in Triton.
  const server = createHttp1Server({ requestTimeout: 0 }, handler);
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
  const server = createHttp2Server((req, res) => handler(req, withSpecGrpcMessage(res)));
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

/**
 * Connect writes `grpc-message` with `encodeURIComponent`, which also escapes `:`, `/`, `,`, `=`;
 * the gRPC spec leaves printable ASCII other than `%` as it is, and some clients (grpc-js) only
 * undo the spec's escaping, showing `%3A` in Triton's messages. Rewrite the header the way the spec
 * (and Triton's C++ server) writes it.
 */
function withSpecGrpcMessage(res: Http2ServerResponse): Http2ServerResponse {
  const fix = (headers: unknown) => {
    if (!headers || typeof headers !== "object") return;
    const record = headers as Record<string, unknown>;
    const message = record["grpc-message"];
    if (typeof message === "string") record["grpc-message"] = specPercentEncode(safeDecode(message));
  };
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => Http2ServerResponse;
  const addTrailers = res.addTrailers.bind(res);
  res.writeHead = ((...args: unknown[]) => {
    fix(args[args.length - 1]);
    return writeHead(...args);
  }) as typeof res.writeHead;
  res.addTrailers = (trailers) => {
    fix(trailers);
    addTrailers(trailers);
  };
  return res;
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
