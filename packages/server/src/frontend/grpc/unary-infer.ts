import type { Http2ServerRequest, Http2ServerResponse, IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { promisify } from "node:util";
import { gunzip, inflate } from "node:zlib";
import { toBinary } from "@bufbuild/protobuf";
import { type ModelInferResponse, ModelInferResponseSchema } from "@galley/proto";
import { now } from "../../clock/clock.js";
import { hiddenCause, InferenceError, toInferenceError } from "../../core/errors.js";
import type { InferenceServer } from "../../core/inference-server.js";
import { specPercentEncode } from "../listen.js";
import { decodeModelInfer } from "./grpc-codec.js";
import { grpcCode } from "./grpc-status.js";
import { GrpcTrace } from "./grpc-trace.js";
import { type GrpcFrontendOptions, inferUnary, restrictedHeader } from "./inference-service.js";

/** The one RPC served without connect-node: it carries the tensors, so it is the one that must be lean. */
export const MODEL_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer";

/** Triton accepts messages up to INT32_MAX bytes. */
const MAX_MESSAGE_BYTES = 0x7fffffff;
/** `raw_output_contents` is field 6 of `ModelInferResponse`, length-delimited: tag (6 << 3) | 2. */
const RAW_OUTPUT_TAG = 0x32;
const DECOMPRESS: Record<string, (data: Uint8Array) => Promise<Uint8Array>> = {
  gzip: promisify(gunzip),
  deflate: promisify(inflate),
};
const UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * Whether a request is a plain gRPC `ModelInfer` that {@link serveModelInfer} answers. gRPC-Web and
 * Connect requests, and every other RPC, stay with connect-node.
 */
export function isPlainModelInfer(req: Http2ServerRequest): boolean {
  if (req.method !== "POST" || req.url !== MODEL_INFER_PATH) return false;
  const type = req.headers["content-type"];
  return type === "application/grpc" || type === "application/grpc+proto";
}

/**
 * `ModelInfer` straight on the HTTP/2 stream: one decode whose `raw_input_contents` are views of
 * the received frame, the core's `infer`, and a response whose raw outputs are written after the
 * encoded head as their own chunks (protobuf lets a repeated field come last), so no tensor is
 * copied into an encoded message. connect-node costs several hundred microseconds of CPU per call
 * here; this path keeps gRPC's semantics (deadlines, cancellation, compression, trailers-only
 * errors, restricted-protocol headers) for this one RPC.
 */
export function serveModelInfer(
  server: InferenceServer,
  options: GrpcFrontendOptions,
  req: Http2ServerRequest,
  res: Http2ServerResponse,
): void {
  const stream = res.stream;
  const headers = req.headers;
  const contentType = headers["content-type"] as string;
  const abort = new AbortController();
  let answered = false;
  const deadline = parseTimeout(headers["grpc-timeout"]);
  const timer =
    deadline === undefined
      ? undefined
      : setTimeout(() => {
          abort.abort();
          fail(4, "Deadline Exceeded");
        }, deadline);
  stream.once("close", () => {
    clearTimeout(timer);
    if (!answered) abort.abort();
  });

  function fail(code: number, message: string): void {
    if (answered || stream.destroyed) return;
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
      { endStream: true },
    );
  }

  function succeed(response: ModelInferResponse): void {
    if (answered || stream.destroyed) return;
    answered = true;
    clearTimeout(timer);
    const raw = response.rawOutputContents;
    response.rawOutputContents = [];
    const head = toBinary(ModelInferResponseSchema, response);
    const pieces: Uint8Array[] = [head];
    let length = head.byteLength;
    for (const bytes of raw) {
      const prefix = fieldPrefix(bytes.byteLength);
      pieces.push(prefix, bytes);
      length += prefix.byteLength + bytes.byteLength;
    }
    const frame = Buffer.allocUnsafe(5);
    frame[0] = 0;
    frame.writeUInt32BE(length, 1);
    // The compatibility response owns the stream's trailers; write through it.
    res.writeHead(200, { "content-type": contentType });
    res.addTrailers({ "grpc-status": "0" });
    stream.cork();
    res.write(frame);
    for (const piece of pieces) res.write(piece);
    res.end();
    stream.uncork();
  }

  const readStart = now();
  let trace: GrpcTrace | undefined;
  readMessage(stream, headers)
    .then(async (bytes) => {
      const header = restrictedHeader(options, "modelInfer", (name) => headerValue(headers, name));
      if (header) throw new InferenceError("RESTRICTED_GRPC", { header });
      const req = decodeModelInfer(bytes);
      // Sampled once the request is read, before the core looks at the model (as Triton).
      const sampled = server.tracing.sample(req.modelName);
      if (!sampled) return succeed(await inferUnary(server, req, abort.signal));
      trace = new GrpcTrace(sampled, readStart, now());
      const response = await inferUnary(server, req, abort.signal, sampled);
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

class GrpcStatus extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

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
    const message = body.subarray(5);
    if ((body[0] as number) & 1) {
      const encoding = headerValue(headers, "grpc-encoding") ?? "identity";
      const decompress = DECOMPRESS[encoding];
      if (!decompress) throw new GrpcStatus(12, `Compression algorithm ${encoding} is not supported`);
      return decompress(message);
    }
    return message;
  });
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n), as milliseconds. */
function parseTimeout(value: string | string[] | undefined): number | undefined {
  if (typeof value !== "string") return undefined;
  const match = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (!match) return undefined;
  return Math.min(Number(match[1]) * (UNITS[match[2] as string] as number), 2_147_483_647);
}

function fieldPrefix(length: number): Uint8Array {
  const out = [RAW_OUTPUT_TAG];
  let n = length;
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Uint8Array.from(out);
}
