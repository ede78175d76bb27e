import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { withTritonParseFailure } from "./connect-parse-failure.js";
import { rewriteHeaders } from "./rewrite-headers.js";

/**
 * A response handed to connect-node, wrapped so that its `grpc-message` is written as the gRPC
 * spec writes it and its parse failures are answered as Triton answers them. The lean `ModelInfer`
 * path writes its own headers and takes neither wrapper (each is several functions per request).
 */
export function connectResponse(req: Http2ServerRequest, res: Http2ServerResponse): Http2ServerResponse {
  return withTritonParseFailure(req, withSpecGrpcMessage(res));
}

/**
 * Connect writes `grpc-message` with `encodeURIComponent`, which also escapes `:`, `/`, `,`, `=`;
 * the gRPC spec leaves printable ASCII other than `%` as it is, and some clients (grpc-js) only
 * undo the spec's escaping, showing `%3A` in Triton's messages. Rewrite the header the way the spec
 * (and Triton's C++ server) writes it.
 */
function withSpecGrpcMessage(res: Http2ServerResponse): Http2ServerResponse {
  return rewriteHeaders(res, (record) => {
    const message = record["grpc-message"];
    if (typeof message === "string") record["grpc-message"] = specPercentEncode(safeDecode(message));
  });
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/**
 * gRPC's percent-encoding: every UTF-8 byte outside 0x20–0x7E, and `%`, as `%XX`; a space that
 * starts or ends the text too, since HTTP/2 drops a header value with whitespace at either end
 * (Triton's "... are: " for a server without GPUs would arrive empty).
 */
export function specPercentEncode(text: string): string {
  let out = "";
  const bytes = Buffer.from(text, "utf8");
  bytes.forEach((byte, i) => {
    const edgeSpace = byte === 0x20 && (i === 0 || i === bytes.length - 1);
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25 && !edgeSpace
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  });
  return out;
}
