// The gRPC port's connection time limits, over raw sockets and node:http2: a connection that opens
// no stream (nothing sent, or only the HTTP/2 preface) is closed within the first-stream bound, a
// connection whose calls are done is closed once idle for --grpc-idle-timeout-secs, and a stream
// that stays open without traffic is never cut. The bounds are short here; each wait is on an event.
import { type ClientHttp2Session, type ClientHttp2Stream, connect as connectHttp2 } from "node:http2";
import { connect, type Socket } from "node:net";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema, ModelStreamInferResponseSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { frame } from "./grpc-wire.js";
import { cleanup, range, simpleRequest, startServer } from "./support/harness.js";

afterEach(cleanup);

const PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

function start(grpc: { idleTimeoutMs?: number; firstStreamTimeoutMs?: number }, exitTimeoutSecs = 5) {
  return startServer({ controlMode: "explicit", loadModels: ["simple"], grpc, exitTimeoutSecs });
}

/** A connected raw socket, and a promise that resolves once the server has closed it. */
async function open(port: number, allowHalfOpen = false): Promise<{ socket: Socket; closed: Promise<void> }> {
  const socket = connect({ port, host: "127.0.0.1", allowHalfOpen });
  socket.resume();
  const closed = new Promise<void>((resolve, reject) => {
    socket.once("close", () => resolve());
    socket.once("error", (error: NodeJS.ErrnoException) => {
      // A reset is a close too; anything else is a failure of the test's own socket.
      if (error.code !== "ECONNRESET" && error.code !== "EPIPE") reject(error);
    });
  });
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  return { socket, closed };
}

/** A session to the server, and promises of its GOAWAY and its close. */
function session(port: number): { session: ClientHttp2Session; goaway: Promise<number>; closed: Promise<void> } {
  const s = connectHttp2(`http://127.0.0.1:${port}`);
  s.on("error", () => {});
  const goaway = new Promise<number>((resolve) => s.once("goaway", (code: number) => resolve(code)));
  const closed = new Promise<void>((resolve) => s.once("close", () => resolve()));
  return { session: s, goaway, closed };
}

/** A ModelStreamInfer stream and a reader of its response messages, one at a time. */
function streamInfer(s: ClientHttp2Session): { stream: ClientHttp2Stream; next: () => Promise<Buffer> } {
  const stream = s.request({
    ":method": "POST",
    ":path": "/inference.GRPCInferenceService/ModelStreamInfer",
    "content-type": "application/grpc",
    te: "trailers",
  });
  let buffered = Buffer.alloc(0);
  const waiting: ((message: Buffer) => void)[] = [];
  stream.on("data", (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 5 && buffered.length >= 5 + buffered.readUInt32BE(1) && waiting.length > 0) {
      const length = buffered.readUInt32BE(1);
      waiting.shift()?.(buffered.subarray(5, 5 + length));
      buffered = buffered.subarray(5 + length);
    }
  });
  return { stream, next: () => new Promise<Buffer>((resolve) => waiting.push(resolve)) };
}

const request = (id: string) =>
  frame(
    toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, simpleRequest(range(16), range(16), { id }))),
  );

describe("gRPC connection time limits", () => {
  it("closes a connection that sends no bytes within the first-stream bound", async () => {
    const { grpcPort } = await start({ firstStreamTimeoutMs: 200, idleTimeoutMs: 0 });
    const { closed } = await open(grpcPort);
    await closed;
  });

  it("closes a connection that sends only the HTTP/2 preface within the first-stream bound", async () => {
    const { grpcPort } = await start({ firstStreamTimeoutMs: 200, idleTimeoutMs: 0 });
    const { socket, closed } = await open(grpcPort);
    socket.write(PREFACE);
    await closed;
  });

  it("holds a connection with no stream no longer than the idle limit when it is the shorter", async () => {
    const { grpcPort } = await start({ idleTimeoutMs: 200, firstStreamTimeoutMs: 600_000 });
    const { socket, closed } = await open(grpcPort);
    socket.write(PREFACE);
    await closed;
  });

  it("cuts the socket of a peer that never closes its side", async () => {
    const { grpcPort } = await start({ firstStreamTimeoutMs: 200 });
    const { socket, closed } = await open(grpcPort, true);
    socket.write(PREFACE);
    await new Promise<void>((resolve) => socket.once("end", () => resolve()));
    // The server's side is gone, not half-closed: a write is answered with a reset, which the
    // next write reports (a half-closed server would read and drop them for ever).
    const refused = await new Promise<NodeJS.ErrnoException>((resolve) => {
      const write = () => socket.write("x", (error) => (error ? resolve(error) : setImmediate(write)));
      write();
    });
    expect(["EPIPE", "ECONNRESET"]).toContain(refused.code);
    await closed;
  });

  it("closes a connection once its calls are done and it has been idle for the limit, with GOAWAY", async () => {
    const { grpcPort } = await start({ idleTimeoutMs: 200 });
    const { session: s, goaway, closed } = session(grpcPort);
    const { stream, next } = streamInfer(s);
    stream.end(request("one"));
    const reply = fromBinary(ModelStreamInferResponseSchema, await next());
    expect(reply.inferResponse?.id).toBe("one");
    expect(await goaway).toBe(0);
    await closed;
  });

  it("never counts a connection with an open stream as idle, however quiet the stream", async () => {
    const { grpcPort } = await start({ idleTimeoutMs: 200 });
    const { session: s, goaway, closed } = session(grpcPort);
    let ended = false;
    void closed.then(() => {
      ended = true;
    });
    const { stream, next } = streamInfer(s);
    stream.write(request("first"));
    expect(fromBinary(ModelStreamInferResponseSchema, await next()).inferResponse?.id).toBe("first");
    // A connection opened now and closed by the idle limit shows the limit has passed for the
    // stream's connection too, with its stream open and silent all the while.
    const clock = await open(grpcPort);
    clock.socket.write(PREFACE);
    await clock.closed;
    expect(ended).toBe(false);
    stream.write(request("second"));
    expect(fromBinary(ModelStreamInferResponseSchema, await next()).inferResponse?.id).toBe("second");
    // Once the stream ends, the connection is idle and goes.
    stream.end();
    expect(await goaway).toBe(0);
    await closed;
  });

  it("closes connections with no open stream at once on shutdown, a peer that never ends its side too", async () => {
    // No limit would close them, and the exit timeout is far beyond the test's.
    const server = await start({ idleTimeoutMs: 0, firstStreamTimeoutMs: 600_000 }, 600);
    const hostile = await open(server.grpcPort, true);
    hostile.socket.write(PREFACE);
    const done = session(server.grpcPort);
    const { stream, next } = streamInfer(done.session);
    stream.end(request("one"));
    await next();
    await new Promise<void>((resolve) => stream.once("close", () => resolve()));
    await server.close();
    await done.closed;
    const refused = await new Promise<NodeJS.ErrnoException>((resolve) => {
      const write = () => hostile.socket.write("x", (error) => (error ? resolve(error) : setImmediate(write)));
      write();
    });
    expect(["EPIPE", "ECONNRESET"]).toContain(refused.code);
  });
});
