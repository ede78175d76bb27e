import type { OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { InferenceServer } from "../../core/inference-server.js";
import { jsonBytes } from "./json-write.js";

/**
 * Writes one reply. Every reply goes through here so that, once the server has begun shutting
 * down, each carries `Connection: close` and keep-alive connections drain.
 */
export class Reply {
  constructor(
    readonly res: ServerResponse,
    readonly server: InferenceServer,
  ) {}

  /** Whether the reply can no longer be written (already sent, or the client is gone). */
  get closed(): boolean {
    return this.res.headersSent || this.res.destroyed || this.res.writableEnded;
  }

  /** Compact JSON of `value` (Triton's writer: see {@link jsonBytes}). */
  json(status: number, value: unknown, headers: OutgoingHttpHeaders = {}): void {
    this.send(status, [jsonBytes(value)], { "Content-Type": "application/json", ...headers });
  }

  /** JSON text already serialized. */
  jsonText(status: number, text: string): void {
    this.send(status, [Buffer.from(text)], { "Content-Type": "application/json" });
  }

  /** An empty body: health answers carry no content type, the others `application/json`. */
  empty(status: number, json = true): void {
    this.send(status, [], json ? { "Content-Type": "application/json" } : {});
  }

  /**
   * Write `parts` in order, each with its own `write` (no concatenation), corked so that the
   * head and every part leave in one `writev` (a `write` each was a system call each: on
   * loopback, most of a small reply's cost); a single part goes with `end`, as one write.
   */
  send(status: number, parts: readonly Uint8Array[], headers: OutgoingHttpHeaders): void {
    if (this.closed) return;
    let length = 0;
    for (const part of parts) length += part.byteLength;
    const all: OutgoingHttpHeaders = { ...headers, "Content-Length": length };
    if (!this.server.accepting) all.Connection = "close";
    const { res } = this;
    res.writeHead(status, all);
    const nonEmpty = parts.filter((part) => part.byteLength > 0);
    if (nonEmpty.length <= 1) {
      res.end(nonEmpty[0]);
      return;
    }
    res.cork();
    for (const part of nonEmpty) res.write(part);
    res.end();
    res.uncork();
  }

  /**
   * Start a streamed reply: the status and headers, no `Content-Length` (so chunked). The body
   * is then written with `res.write` and finished with `res.end`.
   */
  begin(status: number, headers: OutgoingHttpHeaders): void {
    const all: OutgoingHttpHeaders = { ...headers };
    if (!this.server.accepting) all.Connection = "close";
    this.res.writeHead(status, all);
  }
}
