// The lean HTTP/1.1 path: inference requests of the plainest shape served straight from the
// socket, every other request left to Node's HTTP server.
import { type Server as Http1Server, maxHeaderSize, STATUS_CODES } from "node:http";
import { Socket } from "node:net";
import { type Body, BodyReceiver } from "./body-receiver.js";
import { ClientGone, type HttpAnswer, type HttpHandler, type HttpRequest } from "./http-exchange.js";
import type { ClientErrors } from "./http1-client-errors.js";
import { type LeanChoice, type LeanHead, leanHead } from "./lean-head.js";
import { requestTurns } from "./turn-budget.js";

/** The connection's state the listener needs: whether to take work, and its count of it. */
export interface LeanHost {
  /** False once draining: every request from then on is Node's (which refuses new work). */
  accepting(): boolean;
  started(): void;
  finished(): void;
}

/**
 * A reply up to this size leaves as one buffer: copying it costs less than a `writev`'s
 * bookkeeping. A larger one is written as its parts (views of the outputs) in one `writev`.
 */
const ONE_WRITE = 8 * 1024;

/**
 * Unread bytes a busy connection may hold (pipelined requests) before it stops reading the socket.
 * TCP then holds the client back, as Node's parser does once too many responses are queued.
 */
const MAX_BUFFERED = 64 * 1024;

/**
 * Serve `server`'s connections through the lean path first. A connection starts here; each
 * request whose head {@link leanHead} reads and `takes` chooses is served here by `handler`, and at the first
 * request that is anything else the connection is handed, from that request's first byte, to
 * Node's HTTP server (its `connection` listeners), for good. Node's server costs a small request
 * some 25–30 µs of JavaScript (its request and response streams, their events); this path reads the
 * head, copies the body into place and writes the reply in one system call, answering byte for byte
 * as Node would (`Date`, `Connection`, `Keep-Alive`).
 *
 * Its limits are Node's server's: the head within `maxHeaderSize` (else Node answers 431), the body
 * within what `takes` accepts, `idleMs` while a request or its body is awaited, `keepAliveMs` between
 * requests, none while a request runs or its reply is written. A socket error or close aborts the
 * request in flight; a client's end of sending ends the connection, as in Node's server.
 *
 * @returns `closeIdle()`, which closes the lean connections that hold no request, and `closeAll()`.
 */
export function serveLean(
  server: Http1Server,
  handler: HttpHandler,
  takes: LeanChoice,
  host: LeanHost,
  timeouts: { idleMs: number; keepAliveMs: number },
  clientErrors: ClientErrors,
): { closeIdle(): void; closeAll(): void } {
  const toNode = server.listeners("connection") as ((socket: unknown) => void)[];
  server.removeAllListeners("connection");
  const open = new Set<LeanConnection>();
  const handOff = (socket: Socket) => {
    for (const listener of toNode) listener.call(server, socket);
  };
  const limits = {
    head: (server as { maxHeaderSize?: number }).maxHeaderSize || maxHeaderSize,
    keepAlive: keepAliveHeader(timeouts.keepAliveMs),
    ...timeouts,
  };
  server.on("connection", (socket: unknown) => {
    // A stream that is not a socket (a request rewritten by `answerClientErrors`) is Node's.
    if (!(socket instanceof Socket) || !host.accepting()) {
      handOff(socket as Socket);
      return;
    }
    const connection = new LeanConnection(
      socket,
      handler,
      takes,
      host,
      limits,
      (pending) => {
        open.delete(connection);
        if (pending) socket.unshift(pending);
        handOff(socket);
      },
      (taken, head) => {
        open.delete(connection);
        clientErrors.chunkedOnly(taken, head);
      },
    );
    open.add(connection);
    socket.once("close", () => open.delete(connection));
  });
  return {
    closeIdle: () => {
      for (const connection of open) if (connection.idle) connection.socket.destroy();
    },
    closeAll: () => {
      for (const connection of open) connection.socket.destroy();
    },
  };
}

/** Node's `Keep-Alive` response header for a `keepAliveTimeout` (none when there is no timeout). */
function keepAliveHeader(ms: number): string {
  return ms > 0 ? `Keep-Alive: timeout=${Math.floor(ms / 1000)}\r\n` : "";
}

interface Limits {
  head: number;
  idleMs: number;
  keepAliveMs: number;
  keepAlive: string;
}

/** Node's answer to bytes its parser refuses (`_http_server.js`). */
const BAD_REQUEST = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n";

/** The `Date` header's value, made again at most once a second (as Node caches its own). */
let date = "";
let dateSecond = -1;
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    date = new Date(now).toUTCString();
  }
  return date;
}

function ignore(): void {}

/**
 * A request the lean path has taken, as its handler sees it: the head's three headers (see
 * {@link LeanChoice}), and a body handed over once it has arrived and the request's turn has come.
 */
class LeanRequest implements HttpRequest {
  readonly method = "POST";
  readonly target: string;
  readonly signal: AbortSignal;
  /** Where the body goes: known once the handler has asked for it (before its first `await`). */
  offset = 0;
  #body: Promise<Body> | undefined;
  #resolve: ((body: Body) => void) | undefined;
  #reject: ((error: Error) => void) | undefined;

  constructor(
    readonly head: LeanHead,
    readonly controller: AbortController,
  ) {
    this.target = head.target;
    this.signal = controller.signal;
  }

  header(name: string): string | undefined {
    switch (name) {
      case "content-length":
        return String(this.head.contentLength);
      case "inference-header-content-length":
        return this.head.lengthHeader;
      case "accept-encoding":
        return this.head.acceptEncoding;
      case "traceparent":
        return this.head.traceparent;
      case "tracestate":
        return this.head.tracestate;
      default:
        return undefined;
    }
  }

  body(options: { offset?: number }): Promise<Body> {
    if (this.#body) return this.#body;
    this.offset = options.offset ?? 0;
    this.#body = new Promise<Body>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    return this.#body;
  }

  deliver(body: Body): void {
    this.#resolve?.(body);
  }

  /** The client went before the body was handed over: a handler waiting for it finishes. */
  refuse(error: Error): void {
    this.#reject?.(error);
  }
}

/** A request taken: where its body goes, and the handler's answer. */
interface Reading {
  request: LeanRequest;
  receiver: BodyReceiver;
  answer: Promise<HttpAnswer>;
}

/** One connection while the lean path has it. */
class LeanConnection {
  /** Bytes read and not yet taken by a request. */
  #pending: Buffer | undefined;
  /**
   * Bytes read since the last request was taken, in the order they came, joined when the next one
   * is taken (after the running request's reply has left): appending each read to one buffer
   * would copy a trickle of pipelined bytes quadratically.
   */
  #queued: Buffer[] = [];
  #queuedBytes = 0;
  #reading: Reading | undefined;
  #busy = false;
  #controller: AbortController | undefined;
  #gone = false;

  constructor(
    readonly socket: Socket,
    readonly handler: HttpHandler,
    readonly takes: LeanChoice,
    readonly host: LeanHost,
    readonly limits: Limits,
    readonly handOff: (pending: Buffer | undefined) => void,
    readonly chunkedOnly: ClientErrors["chunkedOnly"],
  ) {
    socket.setNoDelay(true);
    socket.setTimeout(limits.idleMs);
    socket.on("data", this.#onData);
    socket.on("end", this.#onEnd);
    socket.on("timeout", this.#onTimeout);
    socket.on("error", this.#onGone);
    socket.on("close", this.#onGone);
  }

  /** Whether no request is in flight or partly read (closing the connection loses nothing sent). */
  get idle(): boolean {
    return !this.#busy && this.#reading === undefined && this.#pending === undefined && this.#queuedBytes === 0;
  }

  #detach(): void {
    const { socket } = this;
    socket.off("data", this.#onData);
    socket.off("end", this.#onEnd);
    socket.off("timeout", this.#onTimeout);
    socket.off("error", this.#onGone);
    socket.off("close", this.#onGone);
    socket.setTimeout(0);
  }

  #onData = (chunk: Buffer): void => {
    const reading = this.#reading;
    if (reading) {
      const take = reading.receiver.write(chunk);
      if (take < chunk.length) this.#pending = chunk.subarray(take);
      if (reading.receiver.complete) this.#run();
      return;
    }
    this.#queued.push(chunk);
    this.#queuedBytes += chunk.length;
    if (!this.#busy) this.#next();
    else if ((this.#pending?.length ?? 0) + this.#queuedBytes > MAX_BUFFERED) this.socket.pause();
  };

  /** Take the next request from the pending bytes, or wait for one. */
  #next(): void {
    if (this.#queuedBytes > 0) {
      const parts = this.#pending ? [this.#pending, ...this.#queued] : this.#queued;
      this.#pending = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts);
      this.#queued.length = 0;
      this.#queuedBytes = 0;
    }
    const pending = this.#pending;
    if (pending === undefined) {
      this.socket.setTimeout(this.limits.keepAliveMs);
      return;
    }
    this.socket.resume();
    const head = this.host.accepting() ? leanHead(pending, this.limits.head) : undefined;
    if (head?.lengthConflict) {
      this.#detach();
      this.chunkedOnly(this.socket, pending);
      return;
    }
    if (!head || !this.takes(head)) {
      this.#detach();
      this.handOff(pending);
      return;
    }
    const reading = this.#take(head);
    const { receiver } = reading;
    const take = receiver.write(pending.subarray(head.length));
    this.#pending = pending.length > head.length + take ? pending.subarray(head.length + take) : undefined;
    this.#reading = reading;
    if (receiver.complete) this.#run();
    else this.socket.setTimeout(this.limits.idleMs);
  }

  /**
   * Hand the request to the handler now, at its head: what it does before its first `await`
   * (finding the model, asking for the body with its offset) runs here, so the body is read
   * straight into place. The body itself is handed over at the request's turn.
   */
  #take(head: LeanHead): Reading {
    const controller = new AbortController();
    this.#controller = controller;
    const request = new LeanRequest(head, controller);
    const answer = this.handler(request);
    // Observed at the request's turn; a handler never rejects, and if one did it must not end the process first.
    answer.catch(ignore);
    return { request, receiver: new BodyReceiver(request.offset, head.contentLength), answer };
  }

  #run(): void {
    this.#ready = this.#reading as Reading;
    this.#reading = undefined;
    this.#busy = true;
    this.socket.setTimeout(0);
    // Busy until its turn (`turn-budget.ts`): bytes that come meanwhile are queued. A client that
    // ends its side meanwhile has its request dropped unanswered, as Node's server aborts it.
    requestTurns.start(this.#start);
  }

  /** A request read whole, waiting for its turn. */
  #ready: Reading | undefined;

  #start = (): void => {
    const reading = this.#ready;
    this.#ready = undefined;
    if (this.#gone || reading === undefined) return;
    this.host.started();
    reading.request.deliver(reading.receiver.body());
    reading.answer.then(this.#reply, this.#fail);
  };

  #reply = (answer: HttpAnswer): void => {
    this.#controller = undefined;
    this.host.finished();
    const { trace } = answer;
    if (this.#gone || answer.stream) {
      trace?.end();
      if (answer.stream) this.#fail();
      return;
    }
    const { socket } = this;
    const parts = answer.parts ?? [];
    const closing = !this.host.accepting();
    let length = 0;
    for (const part of parts) length += part.byteLength;
    let head = `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? "unknown"}\r\n`;
    for (const name in answer.headers) {
      const value = answer.headers[name];
      if (value !== undefined) head += `${name}: ${value}\r\n`;
    }
    head += `Content-Length: ${length}\r\n`;
    head += closing
      ? `Connection: close\r\nDate: ${httpDate()}\r\n\r\n`
      : `Date: ${httpDate()}\r\nConnection: keep-alive\r\n${this.limits.keepAlive}\r\n`;
    let flushed: boolean;
    trace?.capture("HTTP_SEND_START");
    if (head.length + length <= ONE_WRITE) {
      const reply = Buffer.allocUnsafe(head.length + length);
      let at = reply.write(head, 0, "latin1");
      for (const part of parts) {
        reply.set(part, at);
        at += part.byteLength;
      }
      flushed = socket.write(reply);
    } else {
      socket.cork();
      flushed = socket.write(head, "latin1");
      for (const part of parts) if (part.byteLength > 0) flushed = socket.write(part);
      socket.uncork();
    }
    if (trace) {
      if (flushed) this.#sent(trace);
      else socket.once("drain", () => this.#sent(trace)).once("close", () => this.#sent(trace));
    }
    if (closing) {
      this.#busy = false;
      this.#detach();
      socket.destroySoon();
      return;
    }
    // Busy until the reply has left: bytes read meanwhile wait in the queue, so that the next
    // request starts once, in order, and never beside another.
    if (flushed) this.#idleAgain();
    else socket.once("drain", this.#idleAgain);
  };

  /** Once the reply has left (or the connection closed): the trace's end. A second call does nothing. */
  #sent(trace: NonNullable<HttpAnswer["trace"]>): void {
    trace.capture("HTTP_SEND_END");
    trace.end();
  }

  #idleAgain = (): void => {
    this.#busy = false;
    this.#next();
  };

  #fail = (): void => {
    // `answer` answers failures itself; this is a bug in it. The socket is cut without an error:
    // with the listeners detached, an `error` event would have no listener and end the process.
    this.#controller = undefined;
    this.host.finished();
    this.#detach();
    this.socket.destroy();
  };

  #onEnd = (): void => {
    // The client sends no more: as Node's server (no `allowHalfOpen`), abort what it sent and close.
    // A body cut short is a request Node's parser refuses at the end of input: 400, as it answers.
    const cut = this.#reading !== undefined;
    this.#onGone();
    if (cut) this.socket.end(BAD_REQUEST);
    else this.socket.end();
  };

  #onTimeout = (): void => {
    this.socket.destroy();
  };

  #onGone = (): void => {
    if (this.#gone) return;
    this.#gone = true;
    this.#controller?.abort();
    // A request not yet started ends too: its handler's body fails, so it finishes what it began.
    (this.#reading ?? this.#ready)?.request.refuse(new ClientGone());
    this.#reading = undefined;
    this.#pending = undefined;
    this.#queued.length = 0;
    this.#queuedBytes = 0;
  };
}
