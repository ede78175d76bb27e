// Two gRPC responders that do no work, for ab-server.ts --floors: what HTTP/2 itself costs a
// `simple`-sized ModelInfer before any server code runs. Each reads a request whole and answers
// a fixed 105-byte message with `grpc-status: 0` trailers (what Galley answers `simple` with,
// size for size).
// - nodeHttp2Floor: node:http2, as Galley's gRPC listener uses it (the `stream` event, `respond`
//   with `waitForTrailers`, `sendTrailers`).
// - minimalHttp2Floor: HTTP/2 framing written directly on a `net` socket: the preface, SETTINGS
//   and PING acknowledged, the connection's receive window reopened, and each stream answered
//   with its HEADERS, DATA and trailing HEADERS in one write. It decodes no header (HPACK), keeps
//   no send window and checks nothing, so it is a bound, not a server: what an HTTP/2 layer of
//   Galley's own, with one write per response as the lean HTTP/1 path has, could at best reach.
import http2 from "node:http2";
import net, { type AddressInfo } from "node:net";

export interface Floor {
  port: number;
  close(): Promise<void>;
}

const MESSAGE = Buffer.alloc(5 + 105, 1);
MESSAGE[0] = 0;
MESSAGE.writeUInt32BE(105, 1);

function listening(server: net.Server | http2.Http2Server): Promise<Floor> {
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: (server.address() as AddressInfo).port,
        close: () => new Promise<void>((done) => server.close(() => done())),
      }),
    );
  });
}

/** node:http2 answering every stream with the fixed reply. */
export function nodeHttp2Floor(): Promise<Floor> {
  const server = http2.createServer();
  const head = { ":status": 200, "content-type": "application/grpc" };
  const trailers = { "grpc-status": "0" };
  const options = { waitForTrailers: true, sendDate: false };
  server.on("stream", (stream) => {
    stream.on("error", () => {});
    stream.on("data", () => {});
    stream.once("end", () => {
      stream.respond(head, options);
      stream.once("wantTrailers", () => stream.sendTrailers(trailers));
      stream.end(MESSAGE);
    });
  });
  return listening(server);
}

const PREFACE_BYTES = 24;
const [DATA, HEADERS, SETTINGS, PING, WINDOW_UPDATE] = [0, 1, 4, 6, 8];
const [END_STREAM, ACK, END_HEADERS] = [1, 1, 4];

function frame(type: number, flags: number, stream: number, payload: Uint8Array): Buffer {
  const out = Buffer.alloc(9 + payload.byteLength);
  out.writeUIntBE(payload.byteLength, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(stream, 5);
  out.set(payload, 9);
  return out;
}

/** HPACK, no Huffman: `:status: 200` (static index 8), then literals without indexing. */
const literal = (name: string, value: string) =>
  Buffer.concat([Buffer.from([0, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value)]);
const HEAD_BLOCK = Buffer.concat([Buffer.from([0x88]), literal("content-type", "application/grpc")]);
const TRAILER_BLOCK = literal("grpc-status", "0");

/** The answer to stream `id`: HEADERS, DATA, trailing HEADERS with END_STREAM. */
function answer(id: number): Buffer {
  return Buffer.concat([
    frame(HEADERS, END_HEADERS, id, HEAD_BLOCK),
    frame(DATA, 0, id, MESSAGE),
    frame(HEADERS, END_HEADERS | END_STREAM, id, TRAILER_BLOCK),
  ]);
}

/** The minimal HTTP/2 framing described above. */
export function minimalHttp2Floor(): Promise<Floor> {
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    socket.on("error", () => {});
    socket.write(frame(SETTINGS, 0, 0, new Uint8Array(0)));
    let pending: Buffer = Buffer.alloc(0);
    let prefaceRead = false;
    let unacknowledged = 0;
    socket.on("data", (chunk: Buffer) => {
      pending = pending.byteLength > 0 ? Buffer.concat([pending, chunk]) : chunk;
      if (!prefaceRead) {
        if (pending.byteLength < PREFACE_BYTES) return;
        pending = pending.subarray(PREFACE_BYTES);
        prefaceRead = true;
      }
      const out: Buffer[] = [];
      while (pending.byteLength >= 9) {
        const length = pending.readUIntBE(0, 3);
        if (pending.byteLength < 9 + length) break;
        const [type, flags] = [pending[3], pending[4] as number];
        const id = pending.readUInt32BE(5) & 0x7fffffff;
        if (type === SETTINGS && !(flags & ACK)) out.push(frame(SETTINGS, ACK, 0, new Uint8Array(0)));
        if (type === PING && !(flags & ACK)) out.push(frame(PING, ACK, 0, pending.subarray(9, 17)));
        if (type === DATA) unacknowledged += length;
        if ((type === DATA || type === HEADERS) && flags & END_STREAM) out.push(answer(id));
        pending = pending.subarray(9 + length);
      }
      if (unacknowledged >= 16384) {
        const increment = Buffer.alloc(4);
        increment.writeUInt32BE(unacknowledged);
        out.push(frame(WINDOW_UPDATE, 0, 0, increment));
        unacknowledged = 0;
      }
      if (out.length > 0) socket.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
    });
  });
  return listening(server);
}
