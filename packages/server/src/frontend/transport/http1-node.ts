// Node's HTTP/1 server as a thin adapter: each of its requests is handed to the protocol as an
// `HttpRequest`, and the `HttpAnswer` written back. Every request the lean path does not take
// comes through here.
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { HttpAnswer, HttpHandler, HttpRequest } from "./http-exchange.js";
import { readBody } from "./node-body.js";

/**
 * A `request` listener that serves `handler`. While `closing()` is true every answer carries
 * `Connection: close`, so that kept-alive connections drain.
 */
export function nodeRequestListener(
  handler: HttpHandler,
  closing: () => boolean,
): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const controller = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) controller.abort();
    };
    res.once("close", onClose);
    const request: HttpRequest = {
      method: req.method ?? "",
      target: req.url ?? "/",
      header: (name) => {
        const value = req.headers[name];
        return Array.isArray(value) ? value.join(", ") : value;
      },
      body: (options) => readBody(req, options),
      signal: controller.signal,
    };
    handler(request)
      .then((answer) => write(res, answer, closing()))
      .catch(() => {
        // The handler answers failures itself; this is a bug in it, or in writing its answer.
        // The client gets a cut connection rather than a guess.
        req.socket.destroy();
      })
      .finally(() => res.off("close", onClose));
  };
}

/** Whether the answer can no longer be written (already sent, or the client is gone). */
function closed(res: ServerResponse): boolean {
  return res.headersSent || res.destroyed || res.writableEnded;
}

async function write(res: ServerResponse, answer: HttpAnswer, closing: boolean): Promise<void> {
  const { trace } = answer;
  try {
    if (answer.stream) await writeStream(res, answer, answer.stream, closing);
    else if (!closed(res)) {
      trace?.capture("HTTP_SEND_START");
      writeWhole(res, answer, closing);
      if (trace) await finished(res);
    }
  } finally {
    if (trace) {
      trace.capture("HTTP_SEND_END");
      trace.end();
    }
  }
}

/**
 * Write the parts in order, each with its own `write` (no concatenation), corked so that the
 * head and every part leave in one `writev` (a `write` each was a system call each: on
 * loopback, most of a small reply's cost); a single part goes with `end`, as one write.
 */
function writeWhole(res: ServerResponse, answer: HttpAnswer, closing: boolean): void {
  const parts = answer.parts ?? [];
  let length = 0;
  for (const part of parts) length += part.byteLength;
  const headers: OutgoingHttpHeaders = { ...answer.headers, "Content-Length": length };
  if (closing) headers.Connection = "close";
  res.writeHead(answer.status, headers);
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

/** A chunked answer: the head with the first chunk, each chunk as the socket takes it. */
async function writeStream(
  res: ServerResponse,
  answer: HttpAnswer,
  stream: AsyncIterable<Uint8Array>,
  closing: boolean,
): Promise<void> {
  const begin = () => {
    answer.trace?.capture("HTTP_SEND_START");
    res.writeHead(answer.status, closing ? { ...answer.headers, Connection: "close" } : answer.headers);
  };
  const drop = () => res.destroy();
  answer.drop?.addEventListener("abort", drop, { once: true });
  if (answer.drop?.aborted) drop();
  // Read to the end even once the client is gone: the producer then sees its request end.
  const gone = () => res.destroyed || res.writableEnded;
  for await (const chunk of stream) {
    if (gone()) continue;
    if (!res.headersSent) begin();
    await sent(res, chunk);
  }
  answer.drop?.removeEventListener("abort", drop);
  if (gone()) return;
  if (!res.headersSent) begin();
  await new Promise<void>((done) => res.end(done));
}

/** Write a chunk; when the socket's buffer is full, wait until it drains or closes. */
function sent(res: ServerResponse, chunk: Uint8Array): Promise<void> {
  if (res.write(chunk)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}

/** Resolves once the answer has left, or the connection closed. */
function finished(res: ServerResponse): Promise<void> {
  if (res.writableFinished || res.destroyed) return Promise.resolve();
  return new Promise<void>((done) => res.once("finish", done).once("close", done));
}
