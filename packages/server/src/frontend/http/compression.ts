import { createDeflate, createGzip } from "node:zlib";
import { InferenceError } from "../../base/errors.js";

/** A content coding the REST frontend reads and writes (PROTOCOL.md §1.1). */
export type Encoding = "identity" | "gzip" | "deflate";

/**
 * The request's `Content-Encoding`, as Triton reads it: exactly `gzip` or `deflate` (zlib
 * format), and empty or `identity` for none.
 *
 * @throws {@link InferenceError} UNSUPPORTED_COMPRESSION (501) for anything else; the reply
 * then carries `Accept-Encoding: gzip, deflate`.
 */
export function requestEncoding(header: string | undefined): Encoding {
  if (header === undefined || header === "" || header === "identity") return "identity";
  if (header === "gzip" || header === "deflate") return header;
  throw new InferenceError("UNSUPPORTED_COMPRESSION");
}

/** What an unsupported request encoding is answered with. */
export const ACCEPTED_ENCODINGS = "gzip, deflate";

/**
 * The reply's encoding from `Accept-Encoding`, as Triton chooses it: among `identity`,
 * `deflate` and `gzip`, the highest `q` (1 when absent) wins and the first listed wins a tie;
 * `q=0` never wins; anything malformed is skipped.
 */
export function responseEncoding(header: string | undefined): Encoding {
  if (header === undefined) return "identity";
  let chosen: Encoding = "identity";
  let weight = 0;
  for (const entry of header.split(",")) {
    const start = entry.search(/[^ ]/);
    const q = entry.indexOf(";q=");
    if (start === -1 || (q !== -1 && start >= q)) continue;
    const type = q === -1 ? entry.slice(start) : entry.slice(start, q);
    let typeWeight = 1;
    if (q !== -1) {
      typeWeight = parseLeadingDouble(entry.slice(q + 3));
      if (Number.isNaN(typeWeight)) continue;
    }
    if ((type === "identity" || type === "deflate" || type === "gzip") && typeWeight > weight) {
      chosen = type;
      weight = typeWeight;
    }
  }
  return chosen;
}

/** `std::stod`: leading whitespace, then the longest decimal prefix; NaN when there is none. */
function parseLeadingDouble(text: string): number {
  const match = /^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/.exec(text);
  return match ? Number(match[0]) : Number.NaN;
}

/**
 * Compress `parts` (written in order, never concatenated) with gzip or zlib deflate at the
 * default level, as Triton does. Resolves with the compressed chunks.
 */
export function compress(parts: readonly Uint8Array[], encoding: "gzip" | "deflate"): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const stream = encoding === "gzip" ? createGzip() : createDeflate();
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("end", () => resolve(chunks));
    stream.on("error", reject);
    for (const part of parts) if (part.byteLength > 0) stream.write(part);
    stream.end();
  });
}
