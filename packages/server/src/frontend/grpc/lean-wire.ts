// What the lean gRPC paths (unary-infer.ts, stream-infer.ts) share: gRPC's length-prefixed
// messages, their compression and deadlines, and responses written as pieces so that no output
// tensor is copied into an encoded message (protobuf lets a repeated field come last).
import type { Http2ServerRequest, IncomingHttpHeaders } from "node:http2";
import { promisify } from "node:util";
import { gunzip, inflate } from "node:zlib";
import { toBinary } from "@bufbuild/protobuf";
import { type ModelInferResponse, ModelInferResponseSchema } from "@galley/proto";
import type { InferenceResponse } from "../../core/inference-request.js";
import { responseToGrpc } from "./grpc-codec.js";

/** Triton accepts messages up to INT32_MAX bytes. */
export const MAX_MESSAGE_BYTES = 0x7fffffff;
/** `raw_output_contents` is field 6 of `ModelInferResponse`, length-delimited: tag (6 << 3) | 2. */
const RAW_OUTPUT_TAG = 0x32;
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

/** Whether a request is a plain gRPC call (not gRPC-Web or Connect, left to connect-node) of the RPC at `path`. */
export function isPlainGrpc(req: Http2ServerRequest, path: string): boolean {
  if (req.method !== "POST" || req.url !== path) return false;
  const type = req.headers["content-type"];
  return type === "application/grpc" || type === "application/grpc+proto";
}

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

/** A length-delimited field's tag and length, as bytes (a Buffer, which HTTP/2 writes as it is). */
export function fieldPrefix(tag: number, length: number): Buffer {
  const out = Buffer.allocUnsafe(1 + varintSize(length));
  out[0] = tag;
  writeVarint(out, 1, length);
  return out;
}

/**
 * A `ModelInferResponse` as pieces: its encoded head, then each raw output as a field of its own
 * around the output's bytes (a view, not a copy). Takes the raw outputs out of `response`.
 */
export function inferResponsePieces(response: ModelInferResponse): { pieces: Uint8Array[]; length: number } {
  const raw = response.rawOutputContents;
  response.rawOutputContents = [];
  const head = toBinary(ModelInferResponseSchema, response);
  const pieces: Uint8Array[] = [head];
  let length = head.byteLength;
  for (const bytes of raw) {
    const prefix = fieldPrefix(RAW_OUTPUT_TAG, bytes.byteLength);
    pieces.push(prefix, bytes);
    length += prefix.byteLength + bytes.byteLength;
  }
  return { pieces, length };
}

/**
 * A core response as the pieces of its `ModelInferResponse` (as {@link inferResponsePieces}),
 * the head written here directly when the response has no parameters and its dims are whole
 * numbers from 0 to 2^53: the same bytes as protobuf-es's `create` and `toBinary`
 * (`lean-wire.test.ts` compares them), at a tenth of their CPU (`simple`'s response: 0.7 against
 * 8.6 µs on Node 26, `bench/grpc-codec.ts`). Any other response goes through protobuf-es.
 */
export function responsePieces(response: InferenceResponse): { pieces: Uint8Array[]; length: number } {
  const head = responseHead(response);
  if (!head) return inferResponsePieces(responseToGrpc(response));
  const pieces: Uint8Array[] = [head];
  let length = head.byteLength;
  for (const { data } of response.outputs) {
    const prefix = fieldPrefix(RAW_OUTPUT_TAG, data.byteLength);
    pieces.push(prefix, data);
    length += prefix.byteLength + data.byteLength;
  }
  return { pieces, length };
}

/**
 * `ModelInferResponse` fields 1, 2, 3 and 5 (model_name, model_version, id, outputs: name,
 * datatype, packed shape), each left out when empty as proto3 does; undefined for a response this
 * does not cover (parameters, or a dim that is not a whole number from 0 to 2^53).
 */
function responseHead(response: InferenceResponse): Uint8Array | undefined {
  for (const _ in response.parameters) return undefined;
  let size =
    stringFieldSize(response.modelName) + stringFieldSize(response.modelVersion) + stringFieldSize(response.id);
  const outputSizes: number[] = [];
  const shapeSizes: number[] = [];
  for (const output of response.outputs) {
    let shapeSize = 0;
    for (const d of output.shape) {
      if (!Number.isSafeInteger(d) || d < 0) return undefined;
      shapeSize += varintSize(d);
    }
    const outputSize =
      stringFieldSize(output.name) +
      stringFieldSize(output.datatype) +
      (shapeSize > 0 ? 1 + varintSize(shapeSize) + shapeSize : 0);
    shapeSizes.push(shapeSize);
    outputSizes.push(outputSize);
    size += 1 + varintSize(outputSize) + outputSize;
  }
  const out = Buffer.allocUnsafe(size);
  let at = writeStringField(out, 0, 0x0a, response.modelName);
  at = writeStringField(out, at, 0x12, response.modelVersion);
  at = writeStringField(out, at, 0x1a, response.id);
  response.outputs.forEach((output, i) => {
    out[at++] = 0x2a;
    at = writeVarint(out, at, outputSizes[i] as number);
    at = writeStringField(out, at, 0x0a, output.name);
    at = writeStringField(out, at, 0x12, output.datatype);
    const shapeSize = shapeSizes[i] as number;
    if (shapeSize === 0) return;
    out[at++] = 0x1a;
    at = writeVarint(out, at, shapeSize);
    for (const d of output.shape) at = writeVarint(out, at, d);
  });
  return out;
}

function varintSize(n: number): number {
  let size = 1;
  for (let v = n; v >= 0x80; v = Math.floor(v / 128)) size++;
  return size;
}

function writeVarint(out: Uint8Array, start: number, n: number): number {
  let at = start;
  let v = n;
  while (v >= 0x80) {
    out[at++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  out[at++] = v;
  return at;
}

/** UTF-8 bytes of `text` (lone surrogates as U+FFFD, as TextEncoder writes them). */
function utf8Size(text: string): number {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) >= 0x80) return Buffer.byteLength(text, "utf8");
  return text.length;
}

function stringFieldSize(text: string): number {
  if (text === "") return 0;
  const bytes = utf8Size(text);
  return 1 + varintSize(bytes) + bytes;
}

function writeStringField(out: Buffer, start: number, tag: number, text: string): number {
  if (text === "") return start;
  const bytes = utf8Size(text);
  out[start] = tag;
  let at = writeVarint(out, start + 1, bytes);
  // Short ASCII (a name, a datatype) byte by byte; anything longer or wider in one native call.
  if (bytes === text.length && bytes <= 32) for (let i = 0; i < bytes; i++) out[at++] = text.charCodeAt(i);
  else at += out.write(text, at, "utf8");
  return at;
}

/** The 5-byte prefix of an uncompressed message of `length` bytes. */
export function messagePrefix(length: number): Buffer {
  const frame = Buffer.allocUnsafe(5);
  frame[0] = 0;
  frame.writeUInt32BE(length, 1);
  return frame;
}
