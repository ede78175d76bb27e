// Every failure of every transport rejects with one error type, ConnectError with a gRPC code:
// against a real Galley server (Triton's errors over REST carry the code the same error has over
// gRPC), a real closed port (connection refused names the URL), real servers that accept a request
// and never answer it (deadlines), and a real HTTP server answering like a proxy (a non-JSON error
// page).
import { createServer as createHttpServer, type Server } from "node:http";
import {
  createServer as createHttp2Server,
  type Http2Server,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from "node:http2";
import { createServer as createNetServer } from "node:net";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, createGrpcClient, createRestClient, type InferenceClient, tensor } from "../src/index.js";

const EXAMPLES = new URL("../../../examples/model_repository", import.meta.url).pathname;
const SIMPLE = {
  inputs: { INPUT0: tensor.int32([1, 16], new Int32Array(16)), INPUT1: tensor.int32([1, 16], new Int32Array(16)) },
};

let galley: GalleyServer;
let grpcUrl: string;
let httpUrl: string;
/** An HTTP/1 server that takes requests and never answers them (REST deadlines). */
let silentHttp: Server;
let silentHttpUrl: string;
/** An HTTP/2 server that takes streams and never answers them (gRPC deadlines). */
let silentGrpc: Http2Server;
let silentGrpcUrl: string;
const held: ServerHttp2Stream[] = [];
const sessions: ServerHttp2Session[] = [];
/** An HTTP/1 server answering every request 502 with an HTML page, as a proxy would. */
let proxy: Server;
let proxyUrl: string;

async function listen(server: Server | Http2Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

async function close(server: Server | Http2Server): Promise<void> {
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** A port nothing listens on: bound by us, then closed. */
async function closedPort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  galley = createServer({
    modelRepositories: [EXAMPLES],
    controlMode: "explicit",
    loadModels: ["simple"],
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  const { grpc, http } = await galley.listen();
  grpcUrl = `http://127.0.0.1:${grpc?.port}`;
  httpUrl = `http://127.0.0.1:${http?.port}`;
  silentHttp = createHttpServer(() => {});
  silentHttpUrl = await listen(silentHttp);
  silentGrpc = createHttp2Server();
  silentGrpc.on("session", (session) => sessions.push(session));
  silentGrpc.on("stream", (stream) => {
    // The client resets the stream when its deadline passes: expected here.
    stream.on("error", () => {});
    held.push(stream);
  });
  silentGrpcUrl = await listen(silentGrpc);
  proxy = createHttpServer((_, response) => {
    response.writeHead(502, { "content-type": "text/html" }).end("<html><body>Bad Gateway</body></html>");
  });
  proxyUrl = await listen(proxy);
}, 60_000);

afterAll(async () => {
  silentHttp.closeAllConnections();
  for (const session of sessions) session.destroy();
  await Promise.all([galley.close(), close(silentHttp), close(silentGrpc), close(proxy)]);
});

async function failure(call: Promise<unknown>): Promise<ConnectError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("a refused connection", () => {
  it("is UNAVAILABLE on REST and names the URL", async () => {
    const port = await closedPort();
    const client = createRestClient({ baseUrl: `http://127.0.0.1:${port}` });
    const error = await failure(client.serverMetadata());
    expect(error.code).toBe(Code.Unavailable);
    expect(error.message).toContain(`GET http://127.0.0.1:${port}/v2: connection refused`);
    const infer = await failure(client.infer("simple", SIMPLE));
    expect(infer.code).toBe(Code.Unavailable);
    expect(infer.message).toContain(`POST http://127.0.0.1:${port}/v2/models/simple/infer`);
    expect((infer.cause as Error).message).toBe("fetch failed");
  });

  it("is UNAVAILABLE on gRPC and Connect too", async () => {
    const baseUrl = `http://127.0.0.1:${await closedPort()}`;
    for (const client of [createGrpcClient({ baseUrl }), createGrpcClient({ baseUrl, protocol: "connect" })]) {
      expect((await failure(client.serverMetadata())).code).toBe(Code.Unavailable);
      expect((await failure(client.infer("simple", SIMPLE))).code).toBe(Code.Unavailable);
    }
  });
});

describe("a deadline", () => {
  it("that passes is DEADLINE_EXCEEDED on REST, for a call and for inference, naming the URL", async () => {
    const client = createRestClient({ baseUrl: silentHttpUrl });
    const error = await failure(client.serverMetadata({ timeoutMs: 50 }));
    expect(error.code).toBe(Code.DeadlineExceeded);
    expect(error.message).toContain(`GET ${silentHttpUrl}/v2: the operation timed out after 50 ms`);
    const infer = await failure(client.infer("simple", { ...SIMPLE, timeoutMs: 50 }));
    expect(infer.code).toBe(Code.DeadlineExceeded);
    // The client's default deadline, and a fraction of a millisecond, behave the same way.
    const defaulted = createRestClient({ baseUrl: silentHttpUrl, defaultTimeoutMs: 20 });
    expect((await failure(defaulted.isServerLive())).code).toBe(Code.DeadlineExceeded);
    expect((await failure(client.isServerReady({ timeoutMs: 0.001 }))).code).toBe(Code.DeadlineExceeded);
  });

  it("that passes is DEADLINE_EXCEEDED on gRPC (the lean ModelInfer path too) and Connect", async () => {
    for (const client of [
      createGrpcClient({ baseUrl: silentGrpcUrl }),
      createGrpcClient({ baseUrl: silentGrpcUrl, protocol: "connect" }),
    ]) {
      expect((await failure(client.serverMetadata({ timeoutMs: 50 }))).code).toBe(Code.DeadlineExceeded);
      expect((await failure(client.infer("simple", { ...SIMPLE, timeoutMs: 50 }))).code).toBe(Code.DeadlineExceeded);
      expect((await failure(client.infer("simple", { ...SIMPLE, timeoutMs: 0.001 }))).code).toBe(Code.DeadlineExceeded);
    }
  });

  it("of 0 has passed already, against a server that would answer", async () => {
    for (const client of [createRestClient({ baseUrl: httpUrl }), createGrpcClient({ baseUrl: grpcUrl })]) {
      expect((await failure(client.infer("simple", { ...SIMPLE, timeoutMs: 0 }))).code).toBe(Code.DeadlineExceeded);
      expect(await client.isServerLive({ timeoutMs: 10_000 })).toBe(true);
    }
  });

  it("that is not a number of milliseconds from 0 to 2^31 - 1 is INVALID_ARGUMENT, on every transport", async () => {
    const clients: InferenceClient[] = [
      createRestClient({ baseUrl: httpUrl }),
      createGrpcClient({ baseUrl: grpcUrl }),
      createGrpcClient({ baseUrl: grpcUrl, protocol: "connect" }),
    ];
    for (const client of clients) {
      for (const timeoutMs of [Number.NaN, -1, Number.POSITIVE_INFINITY, 2 ** 31]) {
        const error = await failure(client.isServerLive({ timeoutMs }));
        expect(error.code).toBe(Code.InvalidArgument);
        expect(error.rawMessage).toBe(
          `timeoutMs must be a number of milliseconds from 0 to 2147483647, got ${String(timeoutMs)}`,
        );
        expect((await failure(client.infer("simple", { ...SIMPLE, timeoutMs }))).code).toBe(Code.InvalidArgument);
      }
    }
    for (const make of [createRestClient, createGrpcClient]) {
      expect(() => make({ baseUrl: httpUrl, defaultTimeoutMs: -5 })).toThrow(
        expect.objectContaining({ code: Code.InvalidArgument }),
      );
    }
  });
});

describe("an aborted signal", () => {
  it("is CANCELED on REST, as on gRPC", async () => {
    const abort = new AbortController();
    const call = createRestClient({ baseUrl: silentHttpUrl }).infer("simple", { ...SIMPLE, signal: abort.signal });
    abort.abort();
    const error = await failure(call);
    expect(error.code).toBe(Code.Canceled);
    expect(error.message).toContain(`POST ${silentHttpUrl}/v2/models/simple/infer`);
    const grpc = createGrpcClient({ baseUrl: silentGrpcUrl }).infer("simple", {
      ...SIMPLE,
      signal: AbortSignal.abort(),
    });
    expect((await failure(grpc)).code).toBe(Code.Canceled);
  });
});

describe("an error reply over REST", () => {
  it("has the code the same error has over gRPC, and the server's text as rawMessage", async () => {
    const rest = createRestClient({ baseUrl: httpUrl });
    const grpc = createGrpcClient({ baseUrl: grpcUrl });
    const calls: [string, (c: InferenceClient) => Promise<unknown>][] = [
      ["unknown model (404)", (c) => c.modelMetadata("nope")],
      ["bad input (400)", (c) => c.infer("simple", { inputs: { X: tensor.int32([1], [1]) } })],
      ["trace file (501)", (c) => c.traceSettings({ trace_file: "/tmp/x" })],
      ["bad log format (503)", (c) => c.logSettings({ log_format: "nope" })],
    ];
    for (const [what, call] of calls) {
      const [viaRest, viaGrpc] = [await failure(call(rest)), await failure(call(grpc))];
      expect([what, viaRest.code]).toEqual([what, viaGrpc.code]);
      expect([what, viaRest.rawMessage]).toEqual([what, viaGrpc.rawMessage]);
    }
  });

  it("that is not JSON (a proxy's page) keeps its text and maps its status", async () => {
    const error = await failure(createRestClient({ baseUrl: proxyUrl }).serverMetadata());
    expect(error.code).toBe(Code.Unavailable);
    expect(error.rawMessage).toBe("<html><body>Bad Gateway</body></html>");
    expect(error.metadata.get("content-type")).toBe("text/html");
    const infer = await failure(createRestClient({ baseUrl: proxyUrl }).infer("simple", SIMPLE));
    expect(infer.code).toBe(Code.Unavailable);
  });
});
