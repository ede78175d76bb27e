import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import type { ModelInferRequest } from "@galley/proto";
import { now } from "../../base/clock.js";
import { hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceResponse } from "../../base/inference-request.js";
import type { Trace } from "../../base/trace.js";
import type { InferenceServer } from "../../core/inference-server.js";
import { decodeModelInfer, leanRequestFromGrpc } from "./grpc-codec.js";
import { specPercentEncode } from "./grpc-message.js";
import { grpcCode } from "./grpc-status.js";
import { GrpcTrace } from "./grpc-trace.js";
import { type GrpcFrontendOptions, inferDecoded, inferUnaryCore, restrictedHeader } from "./inference-service.js";
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
  responsePieces,
} from "./lean-wire.js";

/** The one RPC served without connect-node: it carries the tensors, so it is the one that must be lean. */
export const MODEL_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer";

/**
 * Whether a stream is a plain gRPC `ModelInfer` that {@link serveModelInfer} answers. gRPC-Web and
 * Connect requests, and every other RPC, stay with connect-node.
 */
export function isPlainModelInfer(headers: IncomingHttpHeaders): boolean {
  return isPlainGrpc(headers, MODEL_INFER_PATH);
}

/**
 * `ModelInfer` straight on the HTTP/2 stream: one decode whose `raw_input_contents` are views of
 * the received frame, the core's `infer`, and a response whose raw outputs are written after the
 * encoded head as their own chunks (protobuf lets a repeated field come last), so no tensor is
 * copied into an encoded message. connect-node costs several hundred microseconds of CPU per call
 * here; this path keeps gRPC's semantics (deadlines, cancellation, compression, trailers-only
 * errors, restricted-protocol headers) for this one RPC. It is served from the server's `stream`
 * event, without Node's compatibility request and response (~5 µs of CPU a call under load, 10–20
 * µs of latency at c = 1: bench/README.md).
 */
export function serveModelInfer(
  server: InferenceServer,
  options: GrpcFrontendOptions,
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
): void {
  const contentType = headers["content-type"] as string;
  absorbStreamErrors(stream);
  const abort = new AbortController();
  let answered = false;
  const timer = deadlineTimer(headers, () => {
    abort.abort();
    fail(4, "Deadline Exceeded");
  });
  stream.once("close", () => {
    clearTimeout(timer);
    if (!answered) abort.abort();
  });

  function fail(code: number, message: string): void {
    if (answered || stream.destroyed || stream.closed) return;
    answered = true;
    clearTimeout(timer);
    // Trailers-only: the status travels in the one HEADERS frame.
    stream.respond(
      {
        ":status": 200,
        "content-type": contentType,
        "grpc-status": String(code),
        "grpc-message": specPercentEncode(message),
      },
      RESPOND_TRAILERS_ONLY,
    );
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
  let trace: GrpcTrace | undefined;
  readMessage(stream, headers)
    .then(async (bytes) => {
      const header = restrictedHeader(options, "modelInfer", (name) => headerValue(headers, name));
      if (header) throw new InferenceError("RESTRICTED_GRPC", { header });
      // The common request in one pass; any other through protobuf-es, with its errors.
      const decoded = leanRequestFromGrpc(bytes);
      const req = decoded ? undefined : decodeModelInfer(bytes);
      const infer = (sampled?: Trace) =>
        decoded
          ? inferDecoded(server, decoded, abort.signal, sampled)
          : inferUnaryCore(server, req as ModelInferRequest, abort.signal, sampled);
      // Sampled once the request is read, before the core looks at the model (as Triton).
      const sampled = server.tracing.sample(decoded ? decoded.modelName : (req as ModelInferRequest).modelName);
      if (!sampled) return succeed(await infer());
      trace = new GrpcTrace(sampled, readStart, now());
      const response = await infer(sampled);
      trace.responded();
      trace.mark("GRPC_SEND_START");
      succeed(response);
      trace.mark("GRPC_SEND_END");
    })
    .catch((error: unknown) => {
      if (error instanceof GrpcStatus) return fail(error.code, error.message);
      const failure = toInferenceError(error);
      const hidden = hiddenCause(failure);
      if (hidden !== undefined) server.log.error(`gRPC ModelInfer: ${hidden}`);
      fail(grpcCode(failure), failure.message);
    })
    .finally(() => trace?.end());
}

/** The trailers of a call answered: Node asks for them once the last DATA frame is queued. */
function sendOkTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

const OK_TRAILERS = { "grpc-status": "0" } as const;

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
