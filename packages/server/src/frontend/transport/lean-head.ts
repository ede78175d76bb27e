// The one request head the lean HTTP/1 path serves itself (see `../http1-lean.ts`). Everything
// else is left to Node's parser, so this reads a strict subset of HTTP/1.1 and never refuses.

/** What the lean path reads from a request head. */
export interface LeanHead {
  /** The head's bytes, its closing blank line included: the body starts here. */
  length: number;
  /** The request target, as Node would give it in `req.url`. */
  target: string;
  contentLength: number;
  /** `Inference-Header-Content-Length`. */
  lengthHeader?: string;
  acceptEncoding?: string;
  /** W3C trace context (`traceparent`, `tracestate`), read for the trace extension's mode `opentelemetry`. */
  traceparent?: string;
  tracestate?: string;
  /**
   * The head also has `Transfer-Encoding` (with `Content-Length`, as Python's `requests` sends a
   * generator body): not served here, but its start and end are known, so the lean path hands it
   * to `ClientErrors.chunkedOnly` rather than to Node's parser, which refuses the pair.
   */
  lengthConflict?: true;
}

/**
 * Which requests the lean path serves: of the heads {@link leanHead} reads, those the protocol
 * takes here (the REST frontend's choice: inference within the body limit). The handler then sees
 * only `Content-Length`, `Inference-Header-Content-Length`, `Accept-Encoding`, `traceparent` and
 * `tracestate` of the headers, and must answer whole (no stream).
 */
export type LeanChoice = (head: LeanHead) => boolean;

/** The most header lines a lean head may have; a request with more is Node's. */
export const LEAN_MAX_HEADERS = 64;

const CR = 0x0d;
const LF = 0x0a;
const SP = 0x20;
const HTAB = 0x09;
const REQUEST_LINE = Buffer.from("POST ");
const VERSION = Buffer.from(" HTTP/1.1\r\n");

/** RFC 9110 `tchar`: the bytes of a header name. */
const TOKEN = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
  TOKEN[c.charCodeAt(0)] = 1;

/** The lengths of the header names read below: any other header is passed over without a string. */
const NAME_LENGTHS = new Uint8Array(32);
for (const name of [
  "host",
  "expect",
  "upgrade",
  "connection",
  "content-length",
  "accept-encoding",
  "content-encoding",
  "transfer-encoding",
  "inference-header-content-length",
  "traceparent",
  "tracestate",
])
  NAME_LENGTHS[name.length] = 1;

/**
 * Read `bytes` (from a request's first byte) as a head the lean path serves: a complete
 * `POST <target> HTTP/1.1` head within `maxBytes`, whose target is visible ASCII starting with
 * `/`, whose header lines are `name: value` with token names and values of visible ASCII, spaces
 * and tabs, with one `Host`, one `Content-Length` of digits, at most one
 * `Inference-Header-Content-Length` and `Accept-Encoding`, no `Connection` but `keep-alive`, and
 * no `Transfer-Encoding`, `Expect`, `Upgrade` or `Content-Encoding`.
 *
 * @returns the head, or undefined for anything else (an incomplete head too): Node's parser then
 * reads the request from its first byte and answers it, or refuses it, as for any other.
 */
export function leanHead(bytes: Buffer, maxBytes: number): LeanHead | undefined {
  const end = Math.min(bytes.length, maxBytes);
  if (!startsWith(bytes, REQUEST_LINE, 0)) return undefined;
  let at = REQUEST_LINE.length;
  if (bytes[at] !== 0x2f) return undefined;
  while (at < end && (bytes[at] as number) > SP && (bytes[at] as number) < 0x7f) at++;
  if (!startsWith(bytes, VERSION, at)) return undefined;
  const target = latin1(bytes, REQUEST_LINE.length, at);
  at += VERSION.length;

  let contentLength: number | undefined;
  let hosts = 0;
  let lengthHeader: string | undefined;
  let acceptEncoding: string | undefined;
  let traceparent: string | undefined;
  let tracestate: string | undefined;
  let transferEncoding = false;
  for (let lines = 0; ; lines++) {
    if (at + 1 >= end) return undefined;
    if (bytes[at] === CR) {
      if (bytes[at + 1] !== LF || contentLength === undefined || hosts !== 1) return undefined;
      const head: LeanHead = { length: at + 2, target, contentLength };
      if (transferEncoding) head.lengthConflict = true;
      if (lengthHeader !== undefined) head.lengthHeader = lengthHeader;
      if (acceptEncoding !== undefined) head.acceptEncoding = acceptEncoding;
      if (traceparent !== undefined) head.traceparent = traceparent;
      if (tracestate !== undefined) head.tracestate = tracestate;
      return head;
    }
    if (lines === LEAN_MAX_HEADERS) return undefined;
    const nameStart = at;
    while (at < end && TOKEN[bytes[at] as number] === 1) at++;
    if (at === nameStart || bytes[at] !== 0x3a) return undefined;
    const nameEnd = at;
    at++;
    while (bytes[at] === SP || bytes[at] === HTAB) at++;
    const valueStart = at;
    for (;;) {
      if (at >= end) return undefined;
      const c = bytes[at] as number;
      if (c === CR) break;
      if ((c < SP && c !== HTAB) || c > 0x7e) return undefined;
      at++;
    }
    if (bytes[at + 1] !== LF) return undefined;
    let valueEnd = at;
    while (valueEnd > valueStart && (bytes[valueEnd - 1] === SP || bytes[valueEnd - 1] === HTAB)) valueEnd--;
    at += 2;
    if (NAME_LENGTHS[nameEnd - nameStart] !== 1) continue;
    switch (latin1(bytes, nameStart, nameEnd).toLowerCase()) {
      case "content-length": {
        // Digits alone: Node's parser refuses a tab after them (and versions differ on spaces).
        if (valueEnd !== at - 2) return undefined;
        const digits = valueEnd - valueStart;
        if (contentLength !== undefined || digits === 0 || digits > 15) return undefined;
        let n = 0;
        for (let i = valueStart; i < valueEnd; i++) {
          const d = (bytes[i] as number) - 0x30;
          if (d < 0 || d > 9) return undefined;
          n = n * 10 + d;
        }
        contentLength = n;
        break;
      }
      case "host":
        hosts++;
        break;
      case "inference-header-content-length":
        if (lengthHeader !== undefined) return undefined;
        lengthHeader = latin1(bytes, valueStart, valueEnd);
        break;
      case "accept-encoding":
        if (acceptEncoding !== undefined) return undefined;
        acceptEncoding = latin1(bytes, valueStart, valueEnd);
        break;
      // Repeated, they are Node's to join (a joined traceparent is malformed, and ignored).
      case "traceparent":
        if (traceparent !== undefined) return undefined;
        traceparent = latin1(bytes, valueStart, valueEnd);
        break;
      case "tracestate":
        if (tracestate !== undefined) return undefined;
        tracestate = latin1(bytes, valueStart, valueEnd);
        break;
      case "connection":
        if (latin1(bytes, valueStart, valueEnd).toLowerCase() !== "keep-alive") return undefined;
        break;
      case "transfer-encoding":
        transferEncoding = true;
        break;
      case "expect":
      case "upgrade":
      case "content-encoding":
        return undefined;
    }
  }
}

function startsWith(bytes: Uint8Array, prefix: Uint8Array, at: number): boolean {
  if (at + prefix.length > bytes.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[at + i] !== prefix[i]) return false;
  return true;
}

function latin1(bytes: Buffer, start: number, end: number): string {
  return bytes.toString("latin1", start, end);
}
