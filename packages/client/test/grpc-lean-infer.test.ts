// The gRPC client's lean ModelInfer path (src/grpc-model-infer.ts) against real peers on port 0:
// a Galley server (Triton's errors, deadlines, a 16 MiB round trip, gzip), a bare node:http2
// server that misbehaves on purpose (resets, GOAWAY, broken responses; each error compared with
// what the Connect path raises for the same answer), and the independent @grpc/grpc-js server
// (framing, flow control, grpc-timeout, metadata and gzip as another implementation reads them).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import {
  createServer as createH2Server,
  type Http2Server,
  constants as h2,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import {
  encodeModelInferResponse,
  type ModelInferRequest,
  ModelInferRequestSchema,
  type ModelInferResponse,
  ModelInferResponseSchema,
} from "@galley/proto";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import * as grpc from "@grpc/grpc-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createGrpcClient, type GrpcClientOptions, type InferOptions, tensor } from "../src/index.js";

const EXAMPLES = new URL("../../../examples/model_repository", import.meta.url).pathname;
const A = Int32Array.from({ length: 16 }, (_, i) => i);
const B = Int32Array.from({ length: 16 }, () => 1);
const SIMPLE: InferOptions = { inputs: { INPUT0: tensor.int32([1, 16], A), INPUT1: tensor.int32([1, 16], B) } };

/** A user interceptor that does nothing: a client with one takes the Connect path for `infer`. */
const passThrough: Interceptor = (next) => (request) => next(request);
const connectPath = (options: GrpcClientOptions) => createGrpcClient({ ...options, interceptors: [passThrough] });

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (error: unknown) => error as ConnectError,
  );
const summary = (e: ConnectError) => ({ type: e.constructor.name, code: Code[e.code], message: e.rawMessage });

/** A BYTES tensor of one element: 4-byte little-endian length, then the bytes. */
function oneBytesElement(payload: Uint8Array) {
  const data = new Uint8Array(4 + payload.byteLength);
  new DataView(data.buffer).setUint32(0, payload.byteLength, true);
  data.set(payload, 4);
  return { datatype: "BYTES" as const, shape: [1, 1], data };
}

function seeded(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let state = seed;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1103515245) + 12345) | 0;
    out[i] = state >>> 24;
  }
  return out;
}

describe("lean ModelInfer against a Galley server", () => {
  let server: GalleyServer;
  let baseUrl: string;
  let repository: string;

  beforeAll(async () => {
    // A unary model that answers after MS milliseconds, or when its request is cancelled.
    repository = mkdtempSync(join(tmpdir(), "galley-lean-"));
    mkdirSync(join(repository, "sleepy", "1"), { recursive: true });
    writeFileSync(
      join(repository, "sleepy", "config.pbtxt"),
      'name: "sleepy"\nbackend: "js"\nmax_batch_size: 0\n' +
        'input [ { name: "MS" data_type: TYPE_UINT32 dims: [ 1 ] } ]\n' +
        'output [ { name: "OUT" data_type: TYPE_UINT32 dims: [ 1 ] } ]\n',
    );
    writeFileSync(
      join(repository, "sleepy", "1", "model.mjs"),
      `export default class Sleepy {
  async execute(requests) {
    return Promise.all(requests.map(async (request) => {
      const ms = request.input("MS").typed()[0];
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        request.signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); });
      });
      return { outputs: [{ name: "OUT", datatype: "UINT32", shape: [1], data: Uint32Array.of(ms) }] };
    }));
  }
}
`,
    );
    server = createServer({
      modelRepositories: [EXAMPLES, repository],
      controlMode: "explicit",
      loadModels: ["simple", "simple_identity", "sleepy"],
      http: false,
      grpc: { host: "127.0.0.1", port: 0 },
      metrics: false,
      log: createLogger({ write: () => {} }),
    });
    const { grpc: port } = await server.listen();
    baseUrl = `http://127.0.0.1:${port?.port}`;
  }, 60_000);

  afterAll(async () => {
    await server.close();
    rmSync(repository, { recursive: true, force: true });
  });

  it("answers as the Connect path does", async () => {
    const lean = await createGrpcClient({ baseUrl }).infer("simple", { ...SIMPLE, id: "a" });
    const connect = await connectPath({ baseUrl }).infer("simple", { ...SIMPLE, id: "a" });
    for (const result of [lean, connect]) {
      expect([...result.output("OUTPUT0").int32()]).toEqual([...A].map((a) => a + 1));
      expect([...result.output("OUTPUT1").int32()]).toEqual([...A].map((a) => a - 1));
    }
    const plain = (r: typeof lean) => ({
      ...r,
      output: undefined,
      outputs: Object.values(r.outputs).map((o) => [o.name, o.datatype, o.shape, [...o.data]]),
    });
    expect(plain(lean)).toEqual(plain(connect));
  });

  it("fails an unknown model with NOT_FOUND and Triton's text, the same ConnectError as the Connect path", async () => {
    const request = { inputs: { X: tensor.int32([1], [1]) } };
    const lean = await failure(createGrpcClient({ baseUrl }).infer("no_such_model", request));
    const connect = await failure(connectPath({ baseUrl }).infer("no_such_model", request));
    expect(lean).toBeInstanceOf(ConnectError);
    expect(lean.code).toBe(Code.NotFound);
    expect(lean.message).toBe("[not_found] Request for unknown model: 'no_such_model' is not found");
    expect(summary(lean)).toEqual(summary(connect));
    expect(lean.metadata.get("grpc-status")).toBe("5");
  });

  it("fails a bad input with INVALID_ARGUMENT and Triton's text, as the Connect path does", async () => {
    const request = { inputs: { INPUT0: tensor.int32([1, 8], A.slice(0, 8)), INPUT1: tensor.int32([1, 16], B) } };
    const lean = await failure(createGrpcClient({ baseUrl }).infer("simple", request));
    const connect = await failure(connectPath({ baseUrl }).infer("simple", request));
    expect(lean.code).toBe(Code.InvalidArgument);
    expect(lean.rawMessage).toContain(
      "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]",
    );
    expect(summary(lean)).toEqual(summary(connect));
  });

  it("fails past a call's deadline, or the client's default one, with DEADLINE_EXCEEDED (as the Connect path)", async () => {
    const slow = { inputs: { MS: tensor.uint32([1], [60_000]) } };
    const started = Date.now();
    const lean = await failure(createGrpcClient({ baseUrl }).infer("sleepy", { ...slow, timeoutMs: 200 }));
    const byDefault = await failure(createGrpcClient({ baseUrl, defaultTimeoutMs: 200 }).infer("sleepy", slow));
    const connect = await failure(connectPath({ baseUrl }).infer("sleepy", { ...slow, timeoutMs: 200 }));
    expect(Date.now() - started).toBeLessThan(30_000);
    for (const error of [lean, byDefault]) {
      expect(summary(error)).toEqual({
        type: "ConnectError",
        code: "DeadlineExceeded",
        message: "the operation timed out",
      });
    }
    expect(summary(connect)).toEqual(summary(lean));
    // A call within its deadline still answers.
    const quick = await createGrpcClient({ baseUrl }).infer("sleepy", {
      inputs: { MS: tensor.uint32([1], [1]) },
      timeoutMs: 20_000,
    });
    expect([...quick.output("OUT").uint32()]).toEqual([1]);
  });

  it("fails an aborted call with CANCELED, or with the abort's own ConnectError", async () => {
    const client = createGrpcClient({ baseUrl });
    const slow = { inputs: { MS: tensor.uint32([1], [60_000]) } };
    const before = await failure(client.infer("sleepy", { ...slow, signal: AbortSignal.abort() }));
    // Aborted while a gzip client compresses the request: the call still fails at once.
    const compressing = new AbortController();
    const big = { inputs: { MS: tensor.uint32([1], [60_000]) }, signal: compressing.signal };
    const gzipped = failure(
      createGrpcClient({ baseUrl, compression: "gzip" }).infer("sleepy", {
        ...big,
        parameters: { padding: "x".repeat(4096) },
      }),
    );
    compressing.abort();
    expect((await gzipped).code).toBe(Code.Canceled);
    expect(summary(before)).toEqual({ type: "ConnectError", code: "Canceled", message: "This operation was aborted" });
    const abort = new AbortController();
    const pending = failure(client.infer("sleepy", { ...slow, signal: abort.signal }));
    abort.abort(new ConnectError("stop", Code.Aborted));
    expect(summary(await pending)).toEqual({ type: "ConnectError", code: "Aborted", message: "stop" });
  });

  it("round-trips a 16 MiB tensor byte for byte", async () => {
    const payload = seeded(16 * 1024 * 1024, 7);
    const input = oneBytesElement(payload);
    const result = await createGrpcClient({ baseUrl }).infer("simple_identity", { inputs: { INPUT0: input } });
    const output = result.output("OUTPUT0");
    expect(output.shape).toEqual([1, 1]);
    expect(output.data.byteLength).toBe(input.data.byteLength);
    expect(Buffer.compare(Buffer.from(output.data), Buffer.from(input.data))).toBe(0);
  }, 60_000);

  it("compresses a request of 1 KiB or more with gzip, and the server reads it", async () => {
    const payload = seeded(64 * 1024, 3).map((b) => b & 0x0f);
    const input = oneBytesElement(payload);
    const result = await createGrpcClient({ baseUrl, compression: "gzip" }).infer("simple_identity", {
      inputs: { INPUT0: input },
    });
    expect(Buffer.compare(Buffer.from(result.output("OUTPUT0").data), Buffer.from(input.data))).toBe(0);
  });

  it("serves many concurrent calls on one connection", async () => {
    const client = createGrpcClient({ baseUrl });
    const results = await Promise.all(
      Array.from({ length: 64 }, (_, i) => client.infer("simple", { ...SIMPLE, id: `${i}` })),
    );
    expect(results.map((r) => r.id)).toEqual(Array.from({ length: 64 }, (_, i) => `${i}`));
  });
});

/** A bare HTTP/2 server: `onCall` gets each request once its body has arrived. */
interface Peer {
  baseUrl: string;
  sessions: number;
  calls: { headers: IncomingHttpHeaders; body: Buffer }[];
  server: Http2Server;
}

let peers: Http2Server[] = [];
afterEach(async () => {
  for (const server of peers) {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      // Close every session still open, so `close` returns.
      for (const session of sessionsOf(server)) session.destroy();
    });
  }
  peers = [];
});
const openSessions = new WeakMap<Http2Server, Set<import("node:http2").ServerHttp2Session>>();
const sessionsOf = (server: Http2Server) => openSessions.get(server) ?? new Set();

async function startPeer(
  onCall: (stream: ServerHttp2Stream, request: ModelInferRequest, peer: Peer, index: number) => void,
): Promise<Peer> {
  const server = createH2Server();
  const sessions = new Set<import("node:http2").ServerHttp2Session>();
  openSessions.set(server, sessions);
  const peer: Peer = { baseUrl: "", sessions: 0, calls: [], server };
  server.on("session", (session) => {
    peer.sessions++;
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  server.on("stream", (stream, headers) => {
    // A stream this peer resets on purpose reports it as an error; that is the point, not a failure.
    stream.on("error", () => {});
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.once("end", () => {
      const body = Buffer.concat(chunks);
      peer.calls.push({ headers, body });
      onCall(stream, fromBinary(ModelInferRequestSchema, body.subarray(5)), peer, peer.calls.length - 1);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  peer.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  peers.push(server);
  return peer;
}

/** Answer with one message (`raw_output_contents` echoing the inputs) and grpc-status 0 in the trailers. */
function answer(stream: ServerHttp2Stream, request: ModelInferRequest): void {
  const response = create(ModelInferResponseSchema, {
    modelName: request.modelName,
    id: request.id,
    outputs: request.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape })),
    rawOutputContents: request.rawInputContents,
  });
  const { pieces, byteLength } = encodeModelInferResponse(response);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(byteLength, 1);
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
  stream.write(prefix);
  for (const piece of pieces) stream.write(piece);
  stream.end();
}

const ECHO: InferOptions = { id: "e", inputs: { X: tensor.int32([2], [1, 2]) } };

describe("lean ModelInfer against a bare HTTP/2 peer", () => {
  it("sends the gRPC request Connect would: path, content type, te, headers, restricted protocol, deadline", async () => {
    const peer = await startPeer(answer);
    const client = createGrpcClient({
      baseUrl: peer.baseUrl,
      headers: { "X-Tenant": "t1" },
      restrictedProtocol: { key: "admin", value: "yes" },
    });
    const result = await client.infer("m", { ...ECHO, timeoutMs: 5000 });
    expect([...result.output("X").int32()]).toEqual([1, 2]);
    const { headers, body } = peer.calls[0] ?? { headers: {}, body: Buffer.alloc(0) };
    expect(headers[":path"]).toBe("/inference.GRPCInferenceService/ModelInfer");
    expect(headers["content-type"]).toBe("application/grpc+proto");
    expect(headers.te).toBe("trailers");
    expect(headers["x-tenant"]).toBe("t1");
    expect(headers["triton-grpc-protocol-admin"]).toBe("yes");
    expect(headers["grpc-timeout"]).toMatch(/^\d+m$/);
    // One uncompressed message: the codec's pieces, which decode to what the Connect path sends.
    expect(body[0]).toBe(0);
    expect(body.readUInt32BE(1)).toBe(body.byteLength - 5);
    const sent = fromBinary(ModelInferRequestSchema, body.subarray(5));
    expect(sent.rawInputContents.map((r) => [...r])).toEqual([[1, 0, 0, 0, 2, 0, 0, 0]]);
  });

  it("cancels an in-flight call with RST_STREAM CANCEL when its signal aborts", async () => {
    let arrived: (stream: ServerHttp2Stream) => void = () => {};
    const onServer = new Promise<ServerHttp2Stream>((resolve) => {
      arrived = resolve;
    });
    const peer = await startPeer((stream) => arrived(stream));
    const abort = new AbortController();
    const pending = failure(createGrpcClient({ baseUrl: peer.baseUrl }).infer("m", { ...ECHO, signal: abort.signal }));
    const stream = await onServer;
    const closed = new Promise<number>((resolve) => stream.once("close", () => resolve(stream.rstCode)));
    abort.abort();
    expect(summary(await pending)).toEqual({
      type: "ConnectError",
      code: "Canceled",
      message: "This operation was aborted",
    });
    expect(await closed).toBe(h2.NGHTTP2_CANCEL);
  });

  it("fails a call whose server goes away mid-call, as the Connect path does, and reconnects for the next", async () => {
    const peer = await startPeer((stream, request, _, index) => {
      // Every other call: the connection drops with the call in flight.
      if (index % 2 === 0) stream.session?.destroy();
      else answer(stream, request);
    });
    const lean = createGrpcClient({ baseUrl: peer.baseUrl });
    const leanError = await failure(lean.infer("m", ECHO));
    expect((await lean.infer("m", ECHO)).id).toBe("e");
    const connect = connectPath({ baseUrl: peer.baseUrl });
    const connectError = await failure(connect.infer("m", ECHO));
    expect(summary(leanError)).toEqual(summary(connectError));
    expect(leanError.code).toBe(Code.Canceled);
    // The lean client's two connections (the dropped one, then a new one), the Connect client's one.
    expect(peer.sessions).toBe(3);
  });

  it("finishes a call in flight when GOAWAY arrives, then opens a new connection", async () => {
    const peer = await startPeer((stream, request, _, index) => {
      // The first call: GOAWAY (NO_ERROR, this stream still served), then its answer.
      if (index === 0) stream.session?.goaway(h2.NGHTTP2_NO_ERROR, stream.id ?? 0);
      answer(stream, request);
    });
    const client = createGrpcClient({ baseUrl: peer.baseUrl });
    expect((await client.infer("m", ECHO)).id).toBe("e");
    expect((await client.infer("m", { ...ECHO, id: "f" })).id).toBe("f");
    expect((await client.infer("m", { ...ECHO, id: "g" })).id).toBe("g");
    expect(peer.sessions).toBe(2);
  });

  it("fails an unreachable server with UNAVAILABLE, as the Connect path does", async () => {
    const peer = await startPeer(answer);
    const baseUrl = peer.baseUrl;
    await new Promise<void>((resolve) => peer.server.close(() => resolve()));
    const lean = await failure(createGrpcClient({ baseUrl }).infer("m", ECHO));
    const connect = await failure(connectPath({ baseUrl }).infer("m", ECHO));
    expect(lean.code).toBe(Code.Unavailable);
    expect(summary(lean)).toEqual(summary(connect));
  });

  // Broken answers: each must fail with exactly the error the Connect path raises for it.
  const broken: [string, (stream: ServerHttp2Stream) => void][] = [
    ["a reset stream", (s) => s.close(h2.NGHTTP2_CANCEL)],
    ["REFUSED_STREAM", (s) => s.close(h2.NGHTTP2_REFUSED_STREAM)],
    ["HTTP 503", (s) => s.respond({ ":status": 503 }, { endStream: true })],
    ["another content type", (s) => s.respond({ ":status": 200, "content-type": "text/plain" }, { endStream: true })],
    [
      "a trailers-only error with details",
      (s) =>
        s.respond(
          { ":status": 200, "content-type": "application/grpc", "grpc-status": "8", "grpc-message": "too%20big" },
          { endStream: true },
        ),
    ],
    [
      "no status",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" });
        s.end();
      },
    ],
    [
      "a status but no message",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
        s.end();
      },
    ],
    [
      "a message that is not a ModelInferResponse",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
        s.end(Buffer.from([0, 0, 0, 0, 3, 0xff, 0xff, 0xff]));
      },
    ],
    [
      "an error status in the trailers after headers",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "13", "grpc-message": "it broke" }));
        s.end();
      },
    ],
    [
      "a truncated message",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        s.once("wantTrailers", () => s.sendTrailers({ "grpc-status": "0" }));
        s.end(Buffer.from([0, 0, 0, 0, 30, 1, 2]));
      },
    ],
  ];
  broken.push([
    "GOAWAY with an error code",
    (s) => {
      s.session?.goaway(h2.NGHTTP2_INTERNAL_ERROR);
      s.session?.destroy();
    },
  ]);
  it.each(broken)("fails %s with the Connect path's error", async (_, reply) => {
    const peer = await startPeer((stream) => reply(stream));
    const lean = await failure(createGrpcClient({ baseUrl: peer.baseUrl }).infer("m", ECHO));
    const connect = await failure(connectPath({ baseUrl: peer.baseUrl }).infer("m", ECHO));
    expect(lean).toBeInstanceOf(ConnectError);
    expect(summary(lean)).toEqual(summary(connect));
  });
});

describe("lean ModelInfer against the @grpc/grpc-js server", () => {
  let server: grpc.Server;
  let baseUrl: string;
  const seen: { deadline?: grpc.Deadline; tenant?: grpc.MetadataValue[]; compressed?: string[] } = {};

  beforeAll(async () => {
    server = new grpc.Server({
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
      "grpc.default_compression_algorithm": 2, // gzip for responses, to a client that accepts it
    });
    const definition: grpc.ServiceDefinition = {
      ModelInfer: {
        path: "/inference.GRPCInferenceService/ModelInfer",
        requestStream: false,
        responseStream: false,
        requestSerialize: (m: ModelInferRequest) => Buffer.from(toBinary(ModelInferRequestSchema, m)),
        requestDeserialize: (b: Buffer) => fromBinary(ModelInferRequestSchema, b),
        responseSerialize: (m: ModelInferResponse) => Buffer.from(toBinary(ModelInferResponseSchema, m)),
        responseDeserialize: (b: Buffer) => fromBinary(ModelInferResponseSchema, b),
      },
    };
    server.addService(definition, {
      ModelInfer: (
        call: grpc.ServerUnaryCall<ModelInferRequest, ModelInferResponse>,
        callback: grpc.sendUnaryData<ModelInferResponse>,
      ) => {
        const request = call.request;
        seen.deadline = call.getDeadline();
        seen.tenant = call.metadata.get("x-tenant");
        seen.compressed = call.metadata.get("grpc-accept-encoding").map(String);
        if (request.modelName === "missing") {
          callback({
            code: grpc.status.NOT_FOUND,
            details: `Request for unknown model: '${request.modelName}' is not found`,
          });
          return;
        }
        callback(
          null,
          create(ModelInferResponseSchema, {
            modelName: request.modelName,
            id: request.id,
            outputs: request.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape })),
            rawOutputContents: request.rawInputContents,
          }),
        );
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, p) =>
        error ? reject(error) : resolve(p),
      ),
    );
    baseUrl = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
  });

  it("round-trips a 16 MiB tensor (gzip-compressed response) with the deadline and metadata it reads", async () => {
    const payload = seeded(16 * 1024 * 1024, 11);
    const client = createGrpcClient({ baseUrl, headers: { "x-tenant": "t2" } });
    const result = await client.infer("echo", {
      id: "big",
      inputs: { X: oneBytesElement(payload) },
      timeoutMs: 60_000,
    });
    expect(result.id).toBe("big");
    expect(Buffer.compare(Buffer.from(result.output("X").data.subarray(4)), Buffer.from(payload))).toBe(0);
    expect(seen.tenant).toEqual(["t2"]);
    expect(Number(seen.deadline) - Date.now()).toBeGreaterThan(10_000);
  }, 60_000);

  it("reads a gzip-compressed request, and an error status with its message", async () => {
    const payload = seeded(8192, 5).map((b) => b & 3);
    const client = createGrpcClient({ baseUrl, compression: "gzip" });
    const result = await client.infer("echo", { inputs: { X: oneBytesElement(payload) } });
    expect(Buffer.compare(Buffer.from(result.output("X").data.subarray(4)), Buffer.from(payload))).toBe(0);
    const error = await failure(client.infer("missing", ECHO));
    expect(summary(error)).toEqual({
      type: "ConnectError",
      code: "NotFound",
      message: "Request for unknown model: 'missing' is not found",
    });
  });
});
