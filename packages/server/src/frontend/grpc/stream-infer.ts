import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import {
  encodeModelInferResponse,
  fieldPrefix,
  type ModelInferRequest,
  type ModelStreamInferResponse,
} from "@galley/proto";
import { createAsyncQueue } from "../../base/async-queue.js";
import { hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceServer } from "../../core/inference-server.js";
import { decodeModelInfer } from "./grpc-codec.js";
import { specPercentEncode } from "./grpc-message.js";
import { grpcCode } from "./grpc-status.js";
import { type GrpcFrontendOptions, restrictedHeader, streamInfer } from "./inference-service.js";
import {
  absorbStreamErrors,
  deadlineTimer,
  GrpcStatus,
  headerValue,
  isPlainGrpc,
  MAX_MESSAGE_BYTES,
  messageBytes,
  messagePrefix,
  RESPOND_THEN_TRAILERS,
  RESPOND_TRAILERS_ONLY,
} from "./lean-wire.js";

/** The RPC served here without connect-node: its responses carry a pipeline's outputs (videos). */
export const MODEL_STREAM_INFER_PATH = "/inference.GRPCInferenceService/ModelStreamInfer";
/** `error_message` (1) and `infer_response` (2) of `ModelStreamInferResponse`, length-delimited. */
const ERROR_MESSAGE_TAG = 0x0a;
const INFER_RESPONSE_TAG = 0x12;
const utf8 = new TextEncoder();

/** Whether a stream is a plain gRPC `ModelStreamInfer` that {@link serveModelStreamInfer} answers. */
export function isPlainModelStreamInfer(headers: IncomingHttpHeaders): boolean {
  return isPlainGrpc(headers, MODEL_STREAM_INFER_PATH);
}

/**
 * `ModelStreamInfer` straight on the HTTP/2 stream, with the semantics of `streamInfer` (shared
 * with the connect-node route that gRPC-Web and Connect clients use): requests are decoded as
 * their messages arrive, and each response is written as pieces — its encoded head, then its raw
 * outputs as views — so a large output (a pipeline's video) is neither encoded nor copied on the
 * event loop (connect-node's `toBinary` and envelope copy took ~4.5 ms of main thread for a 3 MB
 * video). A write the peer is not reading waits for `drain` before the next response is made.
 */
export function serveModelStreamInfer(
  server: InferenceServer,
  options: GrpcFrontendOptions,
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
): void {
  const contentType = headers["content-type"] as string;
  absorbStreamErrors(stream);
  const abort = new AbortController();
  let started = false;
  let finished = false;
  const timer = deadlineTimer(headers, () => {
    abort.abort();
    finish(4, "Deadline Exceeded");
  });
  function finish(code: number, message = ""): void {
    if (finished || stream.destroyed || stream.closed) return;
    finished = true;
    clearTimeout(timer);
    const status = { "grpc-status": String(code), ...(message ? { "grpc-message": specPercentEncode(message) } : {}) };
    if (!started) {
      // Trailers-only: the status travels in the one HEADERS frame.
      stream.respond({ ":status": 200, "content-type": contentType, ...status }, RESPOND_TRAILERS_ONLY);
      return;
    }
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
    const pieces: Uint8Array[] = [];
    let length = 0;
    if (message.errorMessage !== "") {
      const text = utf8.encode(message.errorMessage);
      const prefix = fieldPrefix(ERROR_MESSAGE_TAG, text.byteLength);
      pieces.push(prefix, text);
      length += prefix.byteLength + text.byteLength;
    }
    if (message.inferResponse) {
      const inner = encodeModelInferResponse(message.inferResponse);
      const prefix = fieldPrefix(INFER_RESPONSE_TAG, inner.byteLength);
      pieces.push(prefix, ...inner.pieces);
      length += prefix.byteLength + inner.byteLength;
    }
    stream.cork();
    let open = stream.write(messagePrefix(length));
    for (const piece of pieces) open = stream.write(piece);
    stream.uncork();
    return open ? undefined : new Promise((resolve) => stream.once("drain", resolve).once("close", resolve));
  }

  const requests = incoming(stream, headers, (error) => {
    abort.abort();
    fail(error);
  });
  stream.once("close", () => {
    clearTimeout(timer);
    if (!finished) abort.abort();
    requests.end();
  });

  function fail(error: unknown): void {
    if (error instanceof GrpcStatus) {
      finish(error.code, error.message);
      return;
    }
    const failure = toInferenceError(error);
    const hidden = hiddenCause(failure);
    if (hidden !== undefined) server.log.error(`gRPC ModelStreamInfer: ${hidden}`);
    finish(grpcCode(failure), failure.message);
  }

  void (async () => {
    const header = restrictedHeader(options, "modelStreamInfer", (name) => headerValue(headers, name));
    if (header) throw new InferenceError("RESTRICTED_GRPC", { header });
    const closeOnError = headerValue(headers, "triton_grpc_error") === "true";
    for await (const message of streamInfer(server, requests, { signal: abort.signal, closeOnError })) {
      const drained = write(message);
      if (drained) await drained;
      if (finished) break;
    }
    finish(0);
  })().catch(fail);
}

/**
 * The stream's requests, decoded as their messages complete (a message's `raw_input_contents`
 * are views of the received bytes when it came in one chunk). A malformed or oversized message
 * ends the stream through `onError`.
 */
function incoming(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  onError: (error: unknown) => void,
): AsyncIterable<ModelInferRequest> & { end(): void } {
  const ready = createAsyncQueue<ModelInferRequest>();
  /** Messages decompress in order: each waits for the one before it. */
  let decoding: Promise<void> = Promise.resolve();
  const end = () => ready.end();
  const push = (bytes: Uint8Array | Promise<Uint8Array>) => {
    decoding = decoding
      .then(async () => {
        ready.push(decodeModelInfer(bytes instanceof Promise ? await bytes : bytes));
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
