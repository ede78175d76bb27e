// Each port holds a bounded number of connections (`--http-max-connections`,
// `--grpc-max-connections`): past it, a REST connection is answered 503 and closed, and a gRPC
// call UNAVAILABLE, at once; the connections already open keep being served, and a connection
// given back makes room for a new one.
import { type AddressInfo, connect, type Socket } from "node:net";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger, createServer, type GalleyServer } from "../src/index.js";
import { EXAMPLES } from "./http-fixture.js";

let server: GalleyServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const LIMIT = 3;

async function start(): Promise<{ http: AddressInfo; grpc: AddressInfo }> {
  server = createServer({
    modelRepositories: [EXAMPLES],
    controlMode: "explicit",
    loadModels: ["simple"],
    log: createLogger({ info: false, warning: false, error: false }),
    exitTimeoutSecs: 2,
    http: { host: "127.0.0.1", port: 0, maxConnections: LIMIT },
    grpc: { host: "127.0.0.1", port: 0, maxConnections: LIMIT },
    metrics: false,
  });
  const { http, grpc } = await server.listen();
  return { http: http as AddressInfo, grpc: grpc as AddressInfo };
}

/** An open connection that has been answered once (so the server has counted it). */
function kept(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write("GET /v2/health/live HTTP/1.1\r\nHost: h\r\n\r\n"));
    socket.once("data", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Everything the server sends on a new connection after `request`, until it closes it. */
function exchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(request));
    let text = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      text += chunk;
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(text));
  });
}

const closed = (socket: Socket) => new Promise<void>((resolve) => socket.once("close", () => resolve()).destroy());

describe("the ports' connection limits", () => {
  it("REST: a connection past the limit is answered 503 and closed; the others are served; one given back makes room", async () => {
    const { http } = await start();
    const open = await Promise.all(Array.from({ length: LIMIT }, () => kept(http.port)));
    const refused = await exchange(http.port, "GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n");
    expect(refused).toMatch(/^HTTP\/1\.1 503 Service Unavailable\r\n/);
    expect(refused).toContain(`{"error":"too many connections to this port (the limit is ${LIMIT})"}`);
    // A connection already open is still served.
    const answer = new Promise<string>((resolve) =>
      (open[0] as Socket).once("data", (d: Buffer) => resolve(d.toString())),
    );
    (open[0] as Socket).write("GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n");
    expect(await answer).toMatch(/^HTTP\/1\.1 200 OK/);
    await closed(open[1] as Socket);
    // The server sees the close a little after the client: until then a new connection is refused.
    let served = "";
    for (let attempt = 0; attempt < 100 && !served.startsWith("HTTP/1.1 200"); attempt++) {
      served = await exchange(http.port, "GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
      expect(served).toMatch(/^HTTP\/1\.1 (200 OK|503 Service Unavailable)\r\n/);
    }
    expect(served).toMatch(/^HTTP\/1\.1 200 OK/);
    await Promise.all([open[0], open[2]].map((socket) => closed(socket as Socket)));
  });

  it("gRPC: calls on a connection past the limit are UNAVAILABLE; the clients already connected are served", async () => {
    const { grpc } = await start();
    const clients = Array.from({ length: LIMIT + 1 }, () =>
      createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${grpc.port}` })),
    );
    // One after another, so that the last one is the connection past the limit.
    for (const client of clients.slice(0, LIMIT)) expect((await client.serverLive({})).live).toBe(true);
    const error = await clients[LIMIT]?.serverLive({}).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(error?.code).toBe(Code.Unavailable);
    expect(error?.rawMessage).toBe(`too many connections to this port (the limit is ${LIMIT})`);
    expect((await clients[0]?.serverReady({}))?.ready).toBe(true);
  });
});
