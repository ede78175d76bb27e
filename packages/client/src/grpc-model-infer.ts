// The lean gRPC `ModelInfer`: one length-prefixed message written straight onto an HTTP/2 stream of
// the client's session, the response read straight off it. It is the mirror image of the server's
// own lean path (packages/server/src/frontend/grpc/unary-infer.ts): the request's
// `raw_input_contents` go onto the socket as their own chunks after the encoded head (never copied
// into an encoded message; only a whole frame under 16 KiB is gathered into one write), and the
// response's `raw_output_contents` are views of the received message. Both are encoded and decoded
// by @galley/proto's ModelInfer codec, which handles the common messages in one pass. The Connect
// client costs several hundred microseconds of CPU per call for the same RPC (interceptor chain,
// async-iterable pipes, envelope transforms); this path keeps its semantics: the same ConnectErrors
// with Triton's codes and messages, deadlines (`grpc-timeout` and a local timer), cancellation by
// AbortSignal (RST_STREAM CANCEL), headers, gzip both ways, TLS, and connect-node's session manager
// for keepalive pings and reconnecting after GOAWAY.
import {
  type ClientHttp2Stream,
  constants,
  type IncomingHttpHeaders,
  type IncomingHttpStatusHeader,
  type OutgoingHttpHeaders,
} from "node:http2";
import { promisify } from "node:util";
import { gunzip, gzip } from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import { validateResponseWithCompression, validateTrailer } from "@connectrpc/connect/protocol-grpc";
import { compressionGzip, type Http2SessionManager } from "@connectrpc/connect-node";
import {
  decodeModelInferResponse,
  encodeModelInferRequest,
  type ModelInferRequest,
  type ModelInferResponse,
} from "@galley/proto";
import { connectErrorFromNode, connectErrorFromResetCode, webHeaders } from "./grpc-node-error.js";
import { checkTimeoutMs } from "./request-parts.js";

/** What the lean call needs from the client's options. */
export interface ModelInferCallOptions {
  /** The client's one HTTP/2 connection (shared with its Connect transport). */
  sessionManager: Http2SessionManager;
  /** The client's base URL: its path, if any, prefixes the method's. */
  baseUrl: string;
  /** Headers sent with every call (names in any case). */
  headers: Record<string, string>;
  /** Compress requests of 1 KiB or more with gzip, as Connect's transport does. */
  compression: "gzip" | "none";
  defaultTimeoutMs?: number;
}

/** One ModelInfer call: the encoded request in, the decoded response out, or a ConnectError. */
export type ModelInferCall = (
  message: ModelInferRequest,
  options: { signal?: AbortSignal; timeoutMs?: number },
) => Promise<ModelInferResponse>;

/** Messages at least this large are compressed when compression is on (Connect's `compressMinBytes`). */
const COMPRESS_MIN_BYTES = 1024;
/** Triton's limit on a message, and the Connect transport's `readMaxBytes` here. */
const READ_MAX_BYTES = 0x7fffffff;
/**
 * A frame below this size is gathered into one buffer and written with one call (a few hundred
 * bytes of copying against one write per piece); larger ones are written piece by piece, each
 * tensor as it is.
 */
const GATHER_BELOW_BYTES = 16 * 1024;
/** Tell the session manager the connection is alive at most once per this many received bytes. */
const ALIVE_NOTICE_BYTES = 1 << 20;
const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

/** A {@link ModelInferCall} over `options.sessionManager`. */
export function createModelInferCall(options: ModelInferCallOptions): ModelInferCall {
  const sm = options.sessionManager;
  const path = `${new URL(options.baseUrl).pathname.replace(/\/+$/, "")}/inference.GRPCInferenceService/ModelInfer`;
  const base: OutgoingHttpHeaders = {
    "user-agent": "grpc-node-galley",
    ...Object.fromEntries(Object.entries(options.headers).map(([k, v]) => [k.toLowerCase(), v])),
    "content-type": "application/grpc+proto",
    te: "trailers",
    "grpc-accept-encoding": "gzip",
  };

  return async (message, call) => {
    const { signal } = call;
    if (signal?.aborted) throw connectErrorFromNode(signal.reason);
    const timeoutMs = checkTimeoutMs(call.timeoutMs ?? options.defaultTimeoutMs);
    const begin = timeoutMs === undefined ? 0 : performance.now();
    const encoded = encodeModelInferRequest(message);
    let pieces = encoded.pieces;
    let length = encoded.byteLength;
    let flags = 0;
    if (options.compression === "gzip" && length >= COMPRESS_MIN_BYTES) {
      const compressed = await gzipAsync(Buffer.concat(pieces, length));
      pieces = [compressed];
      length = compressed.byteLength;
      flags = 1;
    }
    const prefix = Buffer.allocUnsafe(5);
    prefix[0] = flags;
    prefix.writeUInt32BE(length, 1);
    const headers =
      timeoutMs === undefined && flags === 0
        ? base
        : {
            ...base,
            ...(timeoutMs !== undefined ? { "grpc-timeout": `${Math.max(0, Math.ceil(timeoutMs))}m` } : {}),
            ...(flags !== 0 ? { "grpc-encoding": "gzip" } : {}),
          };
    return new Promise<ModelInferResponse>((resolve, reject) => {
      const exchange = new Exchange(sm, resolve, reject, signal);
      // The deadline counts from the call, compression included.
      if (timeoutMs !== undefined) exchange.deadline(Math.max(0, timeoutMs - (performance.now() - begin)));
      sm.request("POST", path, headers, {}).then(
        (stream) => exchange.start(stream, prefix, pieces, length),
        (error: unknown) => exchange.fail(connectErrorFromNode(error)),
      );
    });
  };
}

/** One call's stream: writes the request, collects the one response message, settles once. */
class Exchange {
  private stream: ClientHttp2Stream | undefined;
  private settled = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly onAbort: (() => void) | undefined;
  private headers: IncomingHttpHeaders | undefined;
  private trailers: IncomingHttpHeaders | undefined;
  private compressed = false;
  /** The response's end was seen: what remains is decoding it, so a close is no failure. */
  private ended = false;
  /** The message's 5-byte prefix as it arrives (it may be split over DATA frames). */
  private prefix = Buffer.allocUnsafe(5);
  private prefixRead = 0;
  /** The message: a view of the chunk it arrived in, or one buffer of its exact size. */
  private message: Uint8Array | undefined;
  private messageRead = 0;
  private messages = 0;
  private sinceNotice = 0;

  constructor(
    private readonly sm: Http2SessionManager,
    private readonly resolve: (response: ModelInferResponse) => void,
    private readonly reject: (error: ConnectError) => void,
    private readonly signal: AbortSignal | undefined,
  ) {
    if (signal) {
      // Through a local: V8 makes a function literal assigned to a property in the old
      // generation, where it keeps this call's objects from young collections.
      const onAbort = () => this.fail(connectErrorFromNode(signal.reason));
      this.onAbort = onAbort;
      // It may have aborted while the request was being compressed.
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }
  }

  deadline(ms: number): void {
    this.timer = setTimeout(() => this.fail(new ConnectError("the operation timed out", Code.DeadlineExceeded)), ms);
  }

  start(stream: ClientHttp2Stream, prefix: Buffer, pieces: readonly Uint8Array[], length: number): void {
    if (this.settled) {
      stream.close(constants.NGHTTP2_CANCEL);
      return;
    }
    this.stream = stream;
    stream.once("response", (headers) => this.onResponse(headers));
    stream.on("data", (chunk: Buffer) => this.onData(chunk));
    stream.once("trailers", (trailers) => {
      this.trailers = trailers;
    });
    stream.once("end", () => void this.onEnd());
    stream.on("error", (error: Error) => {
      // The server answered and closed while the request was still being written: its answer wins.
      if (stream.writableEnded && (error as { code?: string }).code === "ERR_STREAM_WRITE_AFTER_END") return;
      this.fail(connectErrorFromNode(error));
    });
    stream.once("close", () => {
      if (this.ended) return;
      this.fail(
        connectErrorFromResetCode(stream.rstCode) ??
          new ConnectError("protocol error: the stream closed before the response ended", Code.Internal),
      );
    });
    if (5 + length < GATHER_BELOW_BYTES) {
      const frame = Buffer.allocUnsafe(5 + length);
      prefix.copy(frame, 0);
      let at = 5;
      for (const piece of pieces) {
        frame.set(piece, at);
        at += piece.byteLength;
      }
      stream.end(frame);
    } else {
      writeAll(stream, [prefix, ...pieces], 0);
    }
  }

  fail(error: ConnectError): void {
    if (this.settled) return;
    this.finish();
    const stream = this.stream;
    if (stream && !stream.closed) stream.close(constants.NGHTTP2_CANCEL);
    this.reject(error);
  }

  private succeed(response: ModelInferResponse): void {
    if (this.settled) return;
    this.finish();
    this.resolve(response);
  }

  private finish(): void {
    this.settled = true;
    clearTimeout(this.timer);
    if (this.onAbort) this.signal?.removeEventListener("abort", this.onAbort);
  }

  private onResponse(headers: IncomingHttpHeaders & IncomingHttpStatusHeader): void {
    this.headers = headers;
    const type = headers["content-type"];
    const encoding = headers["grpc-encoding"];
    const plain =
      headers[":status"] === 200 &&
      (type === "application/grpc" || type === "application/grpc+proto") &&
      (encoding === undefined || encoding === "identity" || encoding === "gzip") &&
      headers["grpc-status"] === undefined;
    if (plain) {
      this.compressed = encoding === "gzip";
      return;
    }
    // Anything unusual (an HTTP error, another content type, a trailers-only status) is judged by
    // Connect's own validation, so that the error is exactly the one the Connect client raises.
    try {
      const { headerError, compression } = validateResponseWithCompression(
        [compressionGzip],
        headers[":status"] ?? 0,
        webHeaders(headers),
      );
      if (headerError) {
        this.fail(headerError);
        return;
      }
      this.compressed = compression !== undefined;
    } catch (error) {
      this.fail(connectErrorFromNode(error));
    }
  }

  private onData(chunk: Buffer): void {
    if (this.settled) return;
    this.sinceNotice += chunk.byteLength;
    if (this.sinceNotice >= ALIVE_NOTICE_BYTES) {
      this.sinceNotice = 0;
      this.sm.notifyResponseByteRead(this.stream as ClientHttp2Stream);
    }
    let at = 0;
    while (at < chunk.byteLength) {
      if (this.message === undefined) {
        // Reading a prefix: take up to 5 bytes.
        const take = Math.min(5 - this.prefixRead, chunk.byteLength - at);
        chunk.copy(this.prefix, this.prefixRead, at, at + take);
        this.prefixRead += take;
        at += take;
        if (this.prefixRead < 5) return;
        this.prefixRead = 0;
        if (++this.messages > 1) {
          this.fail(
            new ConnectError("protocol error: received extra output message for unary method", Code.Unimplemented),
          );
          return;
        }
        const length = this.prefix.readUInt32BE(1);
        if (length > READ_MAX_BYTES) {
          this.fail(
            new ConnectError(
              `message size ${length} is larger than configured readMaxBytes ${READ_MAX_BYTES}`,
              Code.ResourceExhausted,
            ),
          );
          return;
        }
        if ((this.prefix[0] as number) & 1 && !this.compressed) {
          this.fail(new ConnectError("received compressed envelope, but do not know how to decompress", Code.Internal));
          return;
        }
        if (chunk.byteLength - at >= length) {
          // The whole message is in this chunk: a view, no copy.
          this.message = chunk.subarray(at, at + length);
          this.messageRead = length;
          at += length;
        } else {
          this.message = Buffer.allocUnsafe(length);
          this.messageRead = 0;
        }
        continue;
      }
      const message = this.message;
      const take = Math.min(message.byteLength - this.messageRead, chunk.byteLength - at);
      if (take === 0) {
        this.fail(
          new ConnectError("protocol error: received extra output message for unary method", Code.Unimplemented),
        );
        return;
      }
      message.set(chunk.subarray(at, at + take), this.messageRead);
      this.messageRead += take;
      at += take;
    }
  }

  private async onEnd(): Promise<void> {
    this.ended = true;
    if (this.settled) return;
    // A reset stream ends its readable side too; the reset is the error.
    const reset = connectErrorFromResetCode(this.stream?.rstCode);
    if (reset) {
      this.fail(reset);
      return;
    }
    const trailers = this.trailers;
    if (trailers?.["grpc-status"] !== "0" || trailers["grpc-status-details-bin"] !== undefined) {
      // An error status, or none: Connect's validation raises the same error it would.
      try {
        validateTrailer(webHeaders(trailers), webHeaders(this.headers));
      } catch (error) {
        this.fail(connectErrorFromNode(error));
        return;
      }
    }
    const message = this.message;
    if (message === undefined || this.messageRead < message.byteLength || this.prefixRead > 0) {
      this.fail(
        message === undefined && this.prefixRead === 0
          ? new ConnectError(
              "protocol error: missing output message for unary method",
              trailers?.["grpc-status"] !== undefined ? Code.Unimplemented : Code.Unknown,
            )
          : new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument),
      );
      return;
    }
    let bytes: Uint8Array = message;
    if ((this.prefix[0] as number) & 1) {
      try {
        bytes = await gunzipAsync(message);
      } catch (error) {
        this.fail(connectErrorFromNode(error));
        return;
      }
    }
    let response: ModelInferResponse;
    try {
      response = decodeModelInferResponse(bytes);
    } catch (error) {
      this.fail(new ConnectError(`parse binary: ${(error as Error).message}`, Code.Internal));
      return;
    }
    this.sm.notifyResponseByteRead(this.stream as ClientHttp2Stream);
    this.succeed(response);
  }
}

/** Write `chunks` in order, waiting for `drain` whenever the stream's buffer is full, then end it. */
function writeAll(stream: ClientHttp2Stream, chunks: readonly Uint8Array[], from: number): void {
  for (let i = from; i < chunks.length; i++) {
    if (stream.destroyed) return;
    if (!stream.write(chunks[i]) && i + 1 < chunks.length) {
      stream.once("drain", () => writeAll(stream, chunks, i + 1));
      return;
    }
  }
  if (!stream.destroyed) stream.end();
}
