import type { OutgoingHttpHeaders } from "node:http";
import type { Http2ServerResponse } from "node:http2";

/**
 * Wrap a response so that `fix` sees (and may change) every header block connect-node writes:
 * the response headers, which hold the status of a trailers-only answer, and the trailers.
 */
export function rewriteHeaders(
  res: Http2ServerResponse,
  fix: (headers: Record<string, unknown>) => void,
): Http2ServerResponse {
  const apply = (headers: unknown) => {
    if (headers && typeof headers === "object") fix(headers as Record<string, unknown>);
  };
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => Http2ServerResponse;
  const addTrailers = res.addTrailers.bind(res);
  // Through locals: a function literal assigned to a property is made in the old generation and
  // keeps the request from young collections (development.md).
  const fixedWriteHead = (...args: unknown[]) => {
    apply(args[args.length - 1]);
    return writeHead(...args);
  };
  const fixedAddTrailers = (trailers: OutgoingHttpHeaders) => {
    apply(trailers);
    addTrailers(trailers);
  };
  res.writeHead = fixedWriteHead as typeof res.writeHead;
  res.addTrailers = fixedAddTrailers;
  return res;
}
