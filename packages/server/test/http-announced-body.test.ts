// A request body's buffer is not allocated at the client's word (src/frontend/transport/node-body.ts,
// BodyReceiver): on both HTTP/1 paths, connections that announce 64 MiB and send one byte hold
// almost none of the server's memory, and a large body sent in small writes arrives whole, in
// place after its offset.
import { createHash } from "node:crypto";
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { collector } from "../src/base/heap.js";
import type { HttpHandler } from "../src/frontend/transport/http-exchange.js";
import { listenHttp1 } from "../src/frontend/transport/listen-http1.js";
import type { Listener } from "../src/frontend/transport/listener.js";

const ANNOUNCED = 64 * 1024 * 1024;
const OFFSET = 3;
const listeners: Listener[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await Promise.all(listeners.splice(0).map((l) => l.close(0)));
});

/** What a served body looked like: its length, its SHA-256 and where its bytes start in their buffer. */
const digest = (bytes: Uint8Array, byteOffset = bytes.byteOffset) =>
  JSON.stringify({ length: bytes.byteLength, sha256: createHash("sha256").update(bytes).digest("hex"), byteOffset });

/**
 * A listener whose lean path takes every lean head and whose handler reads every body; `seen`
 * counts the requests whose head (lean) or first body bytes (Node) were taken.
 */
async function listen(): Promise<{ port: number; seen: (count: number) => Promise<void> }> {
  let count = 0;
  let waiting: { count: number; done: () => void } | undefined;
  const saw = () => {
    count++;
    if (waiting && count >= waiting.count) waiting.done();
  };
  // Both paths ask for the body before their first await, as the REST frontend's infer route does.
  const handler: HttpHandler = (request) => {
    const body = request.body({ limit: ANNOUNCED, encoding: "identity", offset: OFFSET });
    // By the next turn the lean path has made (or not) the body's buffer, and Node's path has taken
    // the bytes that came with the head (its stream resumes on the next tick).
    setImmediate(saw);
    return body.then(
      (received) => ({ status: 200, headers: {}, parts: [Buffer.from(digest(received.bytes))] }),
      () => ({ status: 400, headers: {}, parts: [] }),
    );
  };
  const listener = await listenHttp1({ handle: handler, lean: () => true }, "127.0.0.1", 0);
  listeners.push(listener);
  const seen = (wanted: number) =>
    count >= wanted ? Promise.resolve() : new Promise<void>((done) => (waiting = { count: wanted, done }));
  return { port: listener.address.port, seen };
}

/** `Connection: close` keeps a request off the lean path: Node's server reads it. */
const head = (length: number, path: "lean" | "node") =>
  `POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${length}\r\n` +
  (path === "node" ? "Connection: close\r\n" : "") +
  "\r\n";

/** The status line and body of the one response `socket` receives (by its Content-Length). */
function response(socket: Socket): Promise<{ status: string; body: string }> {
  let received = "";
  return new Promise((resolve, reject) => {
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("latin1");
      const end = received.indexOf("\r\n\r\n");
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(received)?.[1] ?? Number.NaN);
      if (end >= 0 && received.length >= end + 4 + length)
        resolve({
          status: received.slice(0, received.indexOf("\r\n")),
          body: received.slice(end + 4, end + 4 + length),
        });
    });
    socket.once("close", () => reject(new Error(`closed after ${JSON.stringify(received.slice(0, 200))}`)));
  });
}

function open(port: number): Socket {
  const socket = connect(port, "127.0.0.1");
  socket.on("error", () => undefined);
  sockets.push(socket);
  return socket;
}

describe.each(["lean", "node"] as const)("a body announced on the %s path", (path) => {
  it("holds no buffer of the announced size while one byte of it has come", async () => {
    const { port, seen } = await listen();
    for (let i = 0; i < 16; i++) open(port).write(`${head(ANNOUNCED, path)}{`);
    await seen(16);
    // What is left after a full collection is what the server holds (with the runner's own).
    // Allocated at the clients' word, these sixteen bodies alone would hold 1 GiB.
    collector()({ type: "major", execution: "sync" });
    expect(process.memoryUsage().arrayBuffers).toBeLessThan(4 * ANNOUNCED);
  });

  it("arrives whole, in place after its offset, when sent in small writes", async () => {
    const { port } = await listen();
    const length = 1024 * 1024 + 7;
    const bytes = Uint8Array.from({ length }, (_, i) => (i * 131) & 0xff);
    const socket = open(port);
    const answered = response(socket);
    socket.write(head(length, path));
    for (let at = 0; at < length; at += 4096) socket.write(bytes.subarray(at, at + 4096));
    expect(await answered).toEqual({ status: "HTTP/1.1 200 OK", body: digest(bytes, OFFSET) });
  });
});
