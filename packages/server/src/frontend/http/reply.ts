import type { ServerResponse } from "node:http";

/** Compact JSON, as Triton writes it (QA greps for exact strings such as `{"error":"..."}`). */
export function replyJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "Content-Type": "application/json",
    "Content-Length": Buffer.byteLength(text),
  });
  res.end(text);
}

/** Triton's error body: `{"error":"<message>"}`. */
export function replyError(res: ServerResponse, status: number, message: string): void {
  replyJson(res, status, { error: message });
}

/** Health replies: a status code and an empty body, nothing else. */
export function replyEmpty(res: ServerResponse, status: number): void {
  res.writeHead(status, { "Content-Length": 0 });
  res.end();
}
