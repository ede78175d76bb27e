// What the lean gRPC paths (unary-infer.ts, stream-infer.ts) share: gRPC's length-prefixed
// messages, their compression and deadlines, and responses written as pieces so that no output
// tensor is copied into an encoded message (protobuf lets a repeated field come last; the pieces
// come from @galley/proto's model-infer-codec.ts, which writes a common head in one pass).
import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import { promisify } from "node:util";
import { gunzip, inflate } from "node:zlib";
import {
  type EncodedPieces,
  encodeModelInferResponse,
  RAW_OUTPUT_CONTENTS_TAG,
  withRawContents,
  writeModelInferResponseHead,
} from "@galley/proto";
import type { InferenceResponse } from "../../base/inference-request.js";
import { responseToGrpc } from "./grpc-codec.js";

/** Triton accepts messages up to INT32_MAX bytes. */
export const MAX_MESSAGE_BYTES = 0x7fffffff;
const DECOMPRESS: Record<string, (data: Uint8Array) => Promise<Uint8Array>> = {
  gzip: promisify(gunzip),
  deflate: promisify(inflate),
};
const UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** A gRPC status to answer with (code and message), for failures below the core. */
export class GrpcStatus extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** Whether a request's headers make it a plain gRPC call (not gRPC-Web or Connect, left to connect-node) of the RPC at `path`. */
export function isPlainGrpc(headers: IncomingHttpHeaders, path: string): boolean {
  if (headers[":method"] !== "POST" || headers[":path"] !== path) return false;
  const type = headers["content-type"];
  return type === "application/grpc" || type === "application/grpc+proto";
}

/**
 * `respond` options of the lean paths. Node adds a `date` header to every response unless told
 * not to; Triton's gRPC server sends none.
 */
export const RESPOND_THEN_TRAILERS = { waitForTrailers: true, sendDate: false };
/** A trailers-only response: the status in the one HEADERS frame. */
export const RESPOND_TRAILERS_ONLY = { endStream: true, sendDate: false };

/**
 * Node emits a client's RST_STREAM with an error code as an 'error' on the server's stream, which
 * would end the process unheard; the lean paths end the call from the stream's 'close' instead.
 */
export function absorbStreamErrors(stream: ServerHttp2Stream): void {
  stream.on("error", ignore);
}

function ignore(): void {}

/** A timer that calls `expired` at the call's `grpc-timeout`; undefined when it has none. */
export function deadlineTimer(headers: IncomingHttpHeaders, expired: () => void): NodeJS.Timeout | undefined {
  const deadline = parseTimeout(headers["grpc-timeout"]);
  return deadline === undefined ? undefined : setTimeout(expired, deadline);
}

export function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
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
export function messageBytes(
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

/**
 * A core response as the pieces of its `ModelInferResponse`: the head (written in one pass when the
 * response has no parameters, byte-equal to protobuf-es and a tenth of its CPU: 0.6 against 7.5 µs
 * for `simple`'s on Node 26, `bench/grpc-codec.ts`), then each output's bytes as they are. A
 * response with parameters goes through `create` and `toBinary`.
 */
export function responsePieces(response: InferenceResponse): EncodedPieces {
  const head = writeModelInferResponseHead(response, response.outputs);
  if (!head) return encodeModelInferResponse(responseToGrpc(response));
  return withRawContents(
    head,
    RAW_OUTPUT_CONTENTS_TAG,
    response.outputs.map((o) => o.data),
  );
}

/** The 5-byte prefix of an uncompressed message of `length` bytes. */
export function messagePrefix(length: number): Buffer {
  const frame = Buffer.allocUnsafe(5);
  frame[0] = 0;
  frame.writeUInt32BE(length, 1);
  return frame;
}
