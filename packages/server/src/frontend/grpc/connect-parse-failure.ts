import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescService } from "@bufbuild/protobuf";
import { GRPCInferenceService, Health } from "@galley/proto";
import { InferenceError } from "../../base/errors.js";
import { rewriteHeaders } from "./rewrite-headers.js";

/** connect-node's text for a request message `fromBinary` refused; the rest is the decoder's JavaScript text. */
const PARSE_FAILURE = "parse binary: ";
/** gRPC-Web's trailer frame flag. */
const TRAILER_FLAG = 0x80;

/** Each RPC's path and the name of its request message, for the error text. */
const REQUEST_TYPES = new Map<string, string>(
  ([GRPCInferenceService, Health] as DescService[]).flatMap((service) =>
    service.methods.map((m) => [`/${service.typeName}/${m.name}`, m.input.name] as const),
  ),
);

/**
 * connect-node parses a unary request's message before any of Galley's code runs (before
 * interceptors and the implementation), and answers one that is not valid protobuf with INTERNAL
 * `parse binary: <the decoder's JavaScript text>`, with no hook to change it. This wraps the
 * response so that this one answer becomes what the lean ModelInfer path and the streams answer:
 * INVALID_ARGUMENT GRPC_BAD_MESSAGE naming the request message, without the engine's text. It is
 * rewritten in each of the three forms connect-node writes it in: gRPC trailers, gRPC-Web's
 * trailer frame, and the Connect protocol's JSON error body. Every other response passes as it is.
 */
export function withTritonParseFailure(req: Http2ServerRequest, res: Http2ServerResponse): Http2ServerResponse {
  const type = String(req.headers["content-type"] ?? "");
  const message = () =>
    new InferenceError("GRPC_BAD_MESSAGE", {
      message: REQUEST_TYPES.get((req.url ?? "").split("?")[0] as string) ?? "request",
      detail: "not a valid protobuf encoding",
    }).message;
  if (type.startsWith("application/grpc-web")) return rewriteGrpcWeb(res, message);
  if (type.startsWith("application/grpc")) return rewriteGrpc(res, message);
  if (type === "application/proto" || req.method === "GET") return rewriteConnect(res, message);
  return res;
}

/** gRPC: the status travels in the trailers (or the headers of a trailers-only answer). */
function rewriteGrpc(res: Http2ServerResponse, message: () => string): Http2ServerResponse {
  return rewriteHeaders(res, (record) => {
    if (record["grpc-status"] === "13" && decoded(record["grpc-message"]).startsWith(PARSE_FAILURE)) {
      record["grpc-status"] = "3";
      record["grpc-message"] = encodeURIComponent(message());
    }
  });
}

/** gRPC-Web: the status travels in the body, in a last frame flagged 0x80 holding `name: value\r\n` lines. */
function rewriteGrpcWeb(res: Http2ServerResponse, message: () => string): Http2ServerResponse {
  const write = res.write.bind(res) as (chunk: unknown, ...rest: unknown[]) => boolean;
  // Through a local: see rewriteHeaders.
  const fixedWrite = (chunk: unknown, ...rest: unknown[]) => write(fixTrailerFrame(chunk, message), ...rest);
  res.write = fixedWrite as typeof res.write;
  return res;
}

function fixTrailerFrame(chunk: unknown, message: () => string): unknown {
  if (!(chunk instanceof Uint8Array) || chunk.byteLength < 5 || chunk[0] !== TRAILER_FLAG) return chunk;
  const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (bytes.readUInt32BE(1) !== bytes.byteLength - 5) return chunk;
  const lines = bytes.subarray(5).toString("latin1").split("\r\n");
  const value = (name: string) =>
    lines
      .find((l) => l.toLowerCase().startsWith(`${name}:`))
      ?.slice(name.length + 1)
      .trim() ?? "";
  if (value("grpc-status") !== "13" || !decoded(value("grpc-message")).startsWith(PARSE_FAILURE)) return chunk;
  const kept = lines.filter((l) => l !== "" && !/^grpc-(status|message):/i.test(l));
  const text = [`grpc-status: 3`, `grpc-message: ${encodeURIComponent(message())}`, ...kept, ""].join("\r\n");
  const payload = Buffer.from(text, "latin1");
  const frame = Buffer.allocUnsafe(5 + payload.byteLength);
  frame[0] = TRAILER_FLAG;
  frame.writeUInt32BE(payload.byteLength, 1);
  payload.copy(frame, 5);
  return frame;
}

/**
 * The Connect protocol's unary RPCs: an error is an HTTP status and a JSON body
 * `{"code":"internal","message":...}` with its Content-Length. The head is held back until the
 * body shows whether it is the parse failure.
 */
function rewriteConnect(res: Http2ServerResponse, message: () => string): Http2ServerResponse {
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => Http2ServerResponse;
  const write = res.write.bind(res) as (chunk: unknown, ...rest: unknown[]) => boolean;
  const end = res.end.bind(res) as (...args: unknown[]) => Http2ServerResponse;
  let held: unknown[] | undefined;
  const release = () => {
    if (held) writeHead(...held);
    held = undefined;
  };
  // Through locals: see rewriteHeaders.
  const heldWriteHead = (...args: unknown[]) => {
    if (args[0] !== 500) return writeHead(...args);
    held = args;
    return res;
  };
  const fixedWrite = (chunk: unknown, ...rest: unknown[]) => {
    if (held && chunk instanceof Uint8Array && isParseFailureJson(chunk)) {
      const body = Buffer.from(JSON.stringify({ code: "invalid_argument", message: message() }));
      const headers = {
        ...(held[held.length - 1] as Record<string, unknown>),
        "content-length": String(body.byteLength),
      };
      held = undefined;
      // Connect's HTTP status for invalid_argument.
      writeHead(400, headers);
      return write(body, ...rest);
    }
    release();
    return write(chunk, ...rest);
  };
  const releasingEnd = (...args: unknown[]) => {
    release();
    return end(...args);
  };
  res.writeHead = heldWriteHead as typeof res.writeHead;
  res.write = fixedWrite as typeof res.write;
  res.end = releasingEnd as typeof res.end;
  return res;
}

function isParseFailureJson(chunk: Uint8Array): boolean {
  try {
    const body = JSON.parse(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString("utf8")) as unknown;
    if (!body || typeof body !== "object") return false;
    const { code, message } = body as { code?: unknown; message?: unknown };
    return code === "internal" && typeof message === "string" && message.startsWith(PARSE_FAILURE);
  } catch {
    return false;
  }
}

function decoded(value: unknown): string {
  if (typeof value !== "string") return "";
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}
