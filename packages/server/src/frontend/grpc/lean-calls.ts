// gRPC calls served straight on their HTTP/2 stream, without connect-node: the two RPCs that carry
// tensors (ModelInfer, ModelStreamInfer) from a plain gRPC client; gRPC-Web, Connect and every
// other RPC stay with connect-node. This file is gRPC's wire for them: length-prefixed messages and
// their compression, deadlines, cancellation, trailers (or a trailers-only answer for an error),
// and responses written as pieces so that no output tensor is copied into an encoded message
// (protobuf lets a repeated field come last: @galley/proto's model-infer-codec.ts and
// `responsePieces`). What a call means — restricted header, read, infer, trace, errors — is
// model-infer.ts's, shared with connect-node's route.
import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { promisify } from "node:util";
import { gunzip, inflate } from "node:zlib";
import { encodeModelStreamInferResponse, type ModelStreamInferResponse } from "@galley/proto";
import { createAsyncQueue } from "../../base/async-queue.js";
import { now } from "../../base/clock.js";
import type { InferenceResponse } from "../../base/inference-request.js";
import type { InferenceServer } from "../../core/inference-server.js";
import { responsePieces } from "./grpc-codec.js";
import { specPercentEncode } from "./grpc-message.js";
import type { GrpcFrontendOptions } from "./grpc-options.js";
import { callStatus, GrpcStatus } from "./grpc-status.js";
import { checkRestricted, type ModelInferInput, modelInfer, readModelInfer, streamInfer } from "./model-infer.js";

/** The RPCs served here. */
const MODEL_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer";
const MODEL_STREAM_INFER_PATH = "/inference.GRPCInferenceService/ModelStreamInfer";
/** Triton accepts messages up to INT32_MAX bytes. */
const MAX_MESSAGE_BYTES = 0x7fffffff;
const DECOMPRESS: Record<string, (data: Uint8Array) => Promise<Uint8Array>> = {
  gzip: promisify(gunzip),
  deflate: promisify(inflate),
};
const UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };
/**
 * `respond` options. Node adds a `date` header to every response unless told not to; Triton's gRPC
 * server sends none.
 */
const RESPOND_THEN_TRAILERS = { waitForTrailers: true, sendDate: false };
/** A trailers-only response: the status in the one HEADERS frame. */
const RESPOND_TRAILERS_ONLY = { endStream: true, sendDate: false };
const OK_TRAILERS = { "grpc-status": "0" } as const;

/**
 * The lean calls over `server`: a function that serves a stream when it is a plain gRPC
 * ModelInfer or ModelStreamInfer (true), or leaves it to connect-node (false).
 */
export function createLeanCalls(
  server: InferenceServer,
  options: GrpcFrontendOptions,
): (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean {
  return (stream, headers) => {
    if (headers[":method"] !== "POST") return false;
    const type = headers["content-type"];
    if (type !== "application/grpc" && type !== "application/grpc+proto") return false;
    const path = headers[":path"];
    if (path === MODEL_INFER_PATH) serveModelInfer(server, options, stream, headers);
    else if (path === MODEL_STREAM_INFER_PATH) serveModelStreamInfer(server, options, stream, headers);
    else return false;
    return true;
  };
}

/**
 * `ModelInfer`: one decode whose `raw_input_contents` are views of the received frame, the core's
 * `infer`, and a response whose raw outputs are written after the encoded head as their own chunks.
 * connect-node costs several hundred microseconds of CPU per call here. It is served from the
 * server's `stream` event, without Node's compatibility request and response (~5 µs of CPU a call
 * under load, 10–20 µs of latency at c = 1: bench/README.md).
 */
function serveModelInfer(
  server: InferenceServer,
  options: GrpcFrontendOptions,
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
): void {
  const contentType = headers["content-type"] as string;
  stream.on("error", ignore);
  const abort = new AbortController();
  let answered = false;
  const timer = deadlineTimer(headers, () => {
    abort.abort();
    fail(DEADLINE_EXCEEDED);
  });
  stream.once("close", () => {
    clearTimeout(timer);
    if (!answered) abort.abort();
  });

  function fail(status: { code: number; message: string }): void {
    if (answered || stream.destroyed || stream.closed) return;
    answered = true;
    clearTimeout(timer);
    answerTrailersOnly(stream, contentType, status.code, status.message);
  }

  function succeed(response: InferenceResponse): void {
    if (answered || stream.destroyed || stream.closed) return;
    answered = true;
    clearTimeout(timer);
    const { pieces, byteLength } = responsePieces(response);
    const frame = messagePrefix(byteLength);
    stream.respond({ ":status": 200, "content-type": contentType }, RESPOND_THEN_TRAILERS);
    stream.once("wantTrailers", sendOkTrailers);
    stream.cork();
    stream.write(frame);
    for (const piece of pieces) stream.write(piece);
    stream.end();
    stream.uncork();
  }

  const readStart = now();
  readMessage(stream, headers)
    .then((bytes) => {
      checkRestricted(options, "inference", (name) => headerValue(headers, name));
      const header = { header: (name: string) => headerValue(headers, name) };
      return modelInfer(server, readModelInfer(bytes, abort.signal), abort.signal, succeed, readStart, header);
    })
    .catch((error: unknown) => fail(callStatus(error, server.log, "ModelInfer")));
}

/**
 * `ModelStreamInfer`, with the semantics of `streamInfer` (shared with the connect-node route that
 * gRPC-Web and Connect clients use): requests are read as their messages arrive, and each response
 * is written as pieces — its encoded head, then its raw outputs as views — so a large output (a
 * pipeline's video) is neither encoded nor copied on the event loop (connect-node's `toBinary` and
 * envelope copy took ~4.5 ms of main thread for a 3 MB video). A write the peer is not reading
 * waits for `drain` before the next response is made.
 */
function serveModelStreamInfer(
  server: InferenceServer,
  options: GrpcFrontendOptions,
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
): void {
  const contentType = headers["content-type"] as string;
  stream.on("error", ignore);
  const abort = new AbortController();
  let started = false;
  let finished = false;
  const timer = deadlineTimer(headers, () => {
    abort.abort();
    finish(DEADLINE_EXCEEDED.code, DEADLINE_EXCEEDED.message);
  });
  function finish(code: number, message = ""): void {
    if (finished || stream.destroyed || stream.closed) return;
    finished = true;
    clearTimeout(timer);
    if (!started) {
      answerTrailersOnly(stream, contentType, code, message);
      return;
    }
    const status = { "grpc-status": String(code), ...(message ? { "grpc-message": specPercentEncode(message) } : {}) };
    stream.once("wantTrailers", () => stream.sendTrailers(status));
    stream.end();
  }

  /** Write one response; resolves when the stream can take the next. */
  function write(message: ModelStreamInferResponse): Promise<void> | undefined {
    if (finished || stream.destroyed || stream.closed) return undefined;
    if (!started) {
      started = true;
      stream.respond({ ":status": 200, "content-type": contentType }, RESPOND_THEN_TRAILERS);
    }
    const { pieces, byteLength } = encodeModelStreamInferResponse(message);
    stream.cork();
    let open = stream.write(messagePrefix(byteLength));
    for (const piece of pieces) open = stream.write(piece);
    stream.uncork();
    return open ? undefined : new Promise((resolve) => stream.once("drain", resolve).once("close", resolve));
  }

  const fail = (error: unknown) => {
    const status = callStatus(error, server.log, "ModelStreamInfer");
    finish(status.code, status.message);
  };
  const requests = incoming(stream, headers, abort.signal, (error) => {
    abort.abort();
    fail(error);
  });
  stream.once("close", () => {
    clearTimeout(timer);
    if (!finished) abort.abort();
    requests.end();
  });

  void (async () => {
    checkRestricted(options, "inference", (name) => headerValue(headers, name));
    const closeOnError = headerValue(headers, "triton_grpc_error") === "true";
    const header = { header: (name: string) => headerValue(headers, name) };
    for await (const message of streamInfer(server, requests, { signal: abort.signal, closeOnError, header })) {
      const drained = write(message);
      if (drained) await drained;
      if (finished) break;
    }
    finish(0);
  })().catch(fail);
}

const DEADLINE_EXCEEDED = { code: 4, message: "Deadline Exceeded" };

/** An error's status in the one HEADERS frame. */
function answerTrailersOnly(stream: ServerHttp2Stream, contentType: string, code: number, message: string): void {
  stream.respond(
    {
      ":status": 200,
      "content-type": contentType,
      "grpc-status": String(code),
      ...(message ? { "grpc-message": specPercentEncode(message) } : {}),
    },
    RESPOND_TRAILERS_ONLY,
  );
}

/** The trailers of a call answered: Node asks for them once the last DATA frame is queued. */
function sendOkTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

/**
 * Node emits a client's RST_STREAM with an error code as an 'error' on the server's stream, which
 * would end the process unheard; the lean calls end from the stream's 'close' instead.
 */
function ignore(): void {}

/**
 * The request's one length-prefixed message, decompressed; a view of the received bytes when they
 * came in one chunk. Plain listeners rather than `for await`: HTTP/2 delivers a big message in
 * 16 KiB DATA frames, and the async iterator's promise per chunk cost about as much CPU as the
 * rest of a 256 KiB request's handling (bench/README.md, "gRPC bodies").
 */
function readMessage(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): Promise<Uint8Array> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const onData = (chunk: Buffer) => {
      total += chunk.byteLength;
      if (total > MAX_MESSAGE_BYTES + 5) {
        finish();
        chunks.length = 0;
        stream.resume();
        reject(new GrpcStatus(8, `Received message larger than max (${total - 5} vs. ${MAX_MESSAGE_BYTES})`));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      finish();
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, total));
    };
    const onClose = () => {
      finish();
      reject(new GrpcStatus(1, "Cancelled"));
    };
    function finish(): void {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("error", onClose);
      stream.off("close", onClose);
    }
    stream.on("data", onData);
    stream.once("end", onEnd);
    stream.once("error", onClose);
    stream.once("close", onClose);
  }).then((body) => {
    if (body.byteLength < 5) throw new GrpcStatus(13, "protocol error: missing message");
    const length = body.readUInt32BE(1);
    if (body.byteLength !== 5 + length) {
      throw new GrpcStatus(
        13,
        body.byteLength < 5 + length
          ? "protocol error: incomplete message"
          : "protocol error: received extra input message for unary method",
      );
    }
    return messageBytes(body[0] as number, body.subarray(5), headers);
  });
}

/**
 * The stream's requests, read as their messages complete (a message's `raw_input_contents` are
 * views of the received bytes when it came in one chunk). A malformed or oversized message ends
 * the stream through `onError`.
 */
function incoming(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  signal: AbortSignal,
  onError: (error: unknown) => void,
): AsyncIterable<ModelInferInput> & { end(): void } {
  const ready = createAsyncQueue<ModelInferInput>();
  /** Messages decompress in order: each waits for the one before it. */
  let decoding: Promise<void> = Promise.resolve();
  const end = () => ready.end();
  const push = (bytes: Uint8Array | Promise<Uint8Array>) => {
    decoding = decoding
      .then(async () => {
        ready.push(readModelInfer(bytes instanceof Promise ? await bytes : bytes, signal));
      })
      .catch((error: unknown) => {
        stream.off("data", onData);
        end();
        onError(error);
      });
  };
  // Chunks are kept until a message is whole, then joined once (a big message comes in 16 KiB frames).
  let chunks: Buffer[] = [];
  let total = 0;
  /** The current message's flag and length, once its 5-byte prefix is in. */
  let prefix: { flag: number; length: number } | undefined;
  const onData = (chunk: Buffer) => {
    chunks.push(chunk);
    total += chunk.byteLength;
    try {
      while (true) {
        if (!prefix) {
          if (total < 5) break;
          const first = (chunks[0] as Buffer).byteLength >= 5 ? (chunks[0] as Buffer) : Buffer.concat(chunks, total);
          const length = first.readUInt32BE(1);
          if (length > MAX_MESSAGE_BYTES)
            throw new GrpcStatus(8, `Received message larger than max (${length} vs. ${MAX_MESSAGE_BYTES})`);
          prefix = { flag: first[0] as number, length };
        }
        if (total < 5 + prefix.length) break;
        const all = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, total);
        push(messageBytes(prefix.flag, all.subarray(5, 5 + prefix.length), headers));
        const rest = all.subarray(5 + prefix.length);
        chunks = rest.byteLength > 0 ? [rest] : [];
        total = rest.byteLength;
        prefix = undefined;
      }
    } catch (error) {
      stream.off("data", onData);
      stream.resume();
      end();
      onError(error);
    }
  };
  stream.on("data", onData);
  stream.once("end", () => {
    if (total > 0) {
      void decoding.then(() => {
        end();
        onError(new GrpcStatus(13, "protocol error: incomplete message"));
      });
      return;
    }
    void decoding.then(end);
  });
  return ready;
}

/** A timer that calls `expired` at the call's `grpc-timeout`; undefined when it has none. */
function deadlineTimer(headers: IncomingHttpHeaders, expired: () => void): NodeJS.Timeout | undefined {
  const deadline = parseTimeout(headers["grpc-timeout"]);
  return deadline === undefined ? undefined : setTimeout(expired, deadline);
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** `grpc-timeout` in ms (capped at the longest timer), or undefined when absent or malformed. */
function parseTimeout(value: string | string[] | undefined): number | undefined {
  if (typeof value !== "string") return undefined;
  const match = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (!match) return undefined;
  return Math.min(Number(match[1]) * (UNITS[match[2] as string] as number), 2_147_483_647);
}

/**
 * One message's bytes after its 5-byte prefix, decompressed when its flag says so.
 * @throws {@link GrpcStatus} UNIMPLEMENTED for an encoding other than gzip or deflate.
 */
function messageBytes(
  flag: number,
  message: Uint8Array,
  headers: IncomingHttpHeaders,
): Uint8Array | Promise<Uint8Array> {
  if ((flag & 1) === 0) return message;
  const encoding = headerValue(headers, "grpc-encoding") ?? "identity";
  const decompress = DECOMPRESS[encoding];
  if (!decompress) throw new GrpcStatus(12, `Compression algorithm ${encoding} is not supported`);
  return decompress(message);
}

/** The 5-byte prefix of an uncompressed message of `length` bytes. */
function messagePrefix(length: number): Buffer {
  const frame = Buffer.allocUnsafe(5);
  frame[0] = 0;
  frame.writeUInt32BE(length, 1);
  return frame;
}
