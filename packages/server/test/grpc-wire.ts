// A gRPC client written against the gRPC-over-HTTP/2 spec with node:http2 only, independent of
// Connect: length-prefixed frames in, trailers out. Used to judge the server by another stack.
import { connect } from "node:http2";

export interface GrpcReply {
  status: number;
  message: string;
  /** The response's headers and trailers together. */
  headers: Record<string, unknown>;
  /** Each response message's protobuf bytes. */
  messages: Buffer[];
}

/** One length-prefixed message (flag 1: compressed). */
export function frame(message: Uint8Array, compressed = false): Buffer {
  const out = Buffer.alloc(5 + message.byteLength);
  out[0] = compressed ? 1 : 0;
  out.writeUInt32BE(message.byteLength, 1);
  out.set(message, 5);
  return out;
}

export interface RawCallOptions {
  headers?: Record<string, string>;
  /** Reset the stream this long after sending (a client's cancel); resolves with status -1 then. */
  cancelAfterMs?: number;
  /** The RST_STREAM code of that reset (default 0x8, NGHTTP2_CANCEL, what a client's cancel sends). */
  resetCode?: number;
  /** Do not end the request stream (a client still sending); it is closed when the server ends. */
  keepOpen?: boolean;
}

/** One call: each of `writes` goes out as its own write (the bytes as given: callers frame them). */
export function rawGrpc(
  origin: string,
  path: string,
  writes: readonly Uint8Array[],
  options: RawCallOptions = {},
): Promise<GrpcReply> {
  const session = connect(origin);
  return new Promise<GrpcReply>((resolve, reject) => {
    session.once("error", reject);
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...options.headers,
    });
    for (const w of writes) stream.write(w);
    if (!options.keepOpen) stream.end();
    if (options.cancelAfterMs !== undefined) {
      setTimeout(() => {
        stream.close(options.resetCode ?? 0x8);
        resolve({ status: -1, message: "cancelled by the client", headers: {}, messages: [] });
      }, options.cancelAfterMs);
    }
    let all: Record<string, unknown> = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      all = { ...h };
    });
    stream.on("trailers", (t) => {
      all = { ...all, ...t };
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", reject);
    stream.on("end", () => {
      // The status ends the call: a client still sending stops, as gRPC clients do.
      if (options.keepOpen) stream.close();
      const body = Buffer.concat(chunks);
      const messages: Buffer[] = [];
      for (let at = 0; at + 5 <= body.length; ) {
        const length = body.readUInt32BE(at + 1);
        messages.push(body.subarray(at + 5, at + 5 + length));
        at += 5 + length;
      }
      resolve({
        status: Number(all["grpc-status"]),
        message: decodeURIComponent(String(all["grpc-message"] ?? "")),
        headers: all,
        messages,
      });
    });
  }).finally(() => session.close());
}

/** A unary call with one uncompressed message. */
export function grpcCall(origin: string, path: string, request: Uint8Array): Promise<GrpcReply> {
  return rawGrpc(origin, path, [frame(request)]);
}
