import { type Server as Http1Server, maxHeaderSize, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { Duplex } from "node:stream";
import { attached, countParserReads, type ParserReads } from "./node-http-internals.js";

/** What the lean path needs of {@link answerClientErrors}. */
export interface ClientErrors {
  /**
   * Serve a request whose head has both `Transfer-Encoding` and `Content-Length` as the chunked
   * request it is (see {@link answerClientErrors}). `head` must start at the request's first byte
   * and hold its whole head: the lean path, which reads every head on a connection it owns from
   * its first byte, knows where requests start; Node's server does not tell.
   */
  chunkedOnly(socket: Socket, head: Buffer): void;
}

/** Node's answers to a request it could not parse (`_http_server.js`), written before it closes the socket. */
const ANSWERS: Record<string, string> = {
  HPE_HEADER_OVERFLOW: "431 Request Header Fields Too Large",
  HPE_CHUNK_EXTENSIONS_OVERFLOW: "413 Payload Too Large",
  ERR_HTTP_REQUEST_TIMEOUT: "408 Request Timeout",
};
/** llhttp's reasons for a head with both `Transfer-Encoding` and `Content-Length`, whichever comes second. */
const LENGTH_CONFLICT = new Set([
  "Content-Length can't be present with Transfer-Encoding",
  "Transfer-Encoding can't be present with Content-Length",
]);
const HEAD_END = Buffer.from("\r\n\r\n");

/**
 * Answer what Node's HTTP parser refuses as Node does (400, 408, 413 or 431, then close), except
 * a request whose head has both `Transfer-Encoding: chunked` and `Content-Length`, which Python's
 * `requests` sends for a generator body with a length header and Triton accepts. llhttp refuses
 * that pair because a proxy that reads the body by its length and a server that reads it chunked
 * disagree on where the next request starts (request smuggling). Node exposes llhttp's leniency
 * only as `insecureHTTPParser`, all of its relaxations at once, so Galley serves such a request
 * itself, the way RFC 9112 §6.1 and §6.3 allow: the chunked coding wins, `Content-Length` is
 * dropped, and the connection closes after the response, so no byte after the body is ever read
 * as a request.
 *
 * This is done only when the refused request's head provably began in the read that holds the
 * refusal: Node's parser reads the socket itself and tells nothing of where a request starts in a
 * read, so Galley counts the reads the parser executes and notes the read in which each message
 * began and the last one in which a message completed. When the refused message began in this
 * read and no earlier message completed in it, the read holds nothing before the refused head but
 * the empty lines llhttp skips: its bytes are that head's start, whether the request is the
 * connection's first or follows others on a kept-alive connection (Python's `requests.Session`).
 * Otherwise (pipelined requests sharing a read, or a head that began in an earlier read) the start
 * cannot be known for certain, guessing it is how smuggling happens, and the request keeps Node's
 * answer (400, then close). Watching every connection's bytes instead would take the socket off
 * Node's native read path, which costs large request bodies about a fifth of their throughput; the
 * counters cost a call per read and per request. They use the parser's callback slots that
 * `_http_common` publishes (`HTTPParser.kOnMessageBegin`, `kOnMessageComplete`, `kOnExecute`);
 * where a Node version lacks them, every such request keeps Node's answer.
 *
 * The head is read on to its end, its `Content-Length` lines removed and `Connection: close`
 * added, and the connection is handed back to the server as a stream that starts with that head
 * and goes on with the socket's bytes: Node's strict parser reads it, and with `Connection: close`
 * it refuses any byte after the request's body.
 */
export function answerClientErrors(server: Http1Server): ClientErrors {
  /** Where, in each socket's parser reads, its messages began and completed. */
  const reads = new WeakMap<object, ParserReads>();
  /** Sockets served through a {@link HeadReplay}, or being refused: Node's handling of them has ended. */
  const takenOver = new WeakSet<object>();
  const replays = new WeakSet<object>();

  server.on("connection", (socket: Socket) => {
    const counted = countParserReads(socket);
    if (counted) reads.set(socket, counted);
  });

  server.on("clientError", (error: Error & { code?: string; reason?: string; rawPacket?: Buffer }, socket: Socket) => {
    if (takenOver.has(socket)) return;
    if (replays.has(socket) && error.code === "HPE_CLOSED_CONNECTION") {
      // Bytes past the body of a `Connection: close` request: read no more, answer the request.
      (socket as unknown as HeadReplay).stopReading();
      return;
    }
    const raw = error.rawPacket;
    const at = reads.get(socket);
    if (
      LENGTH_CONFLICT.has(error.reason ?? "") &&
      raw !== undefined &&
      !replays.has(socket) &&
      at !== undefined &&
      at.began === at.current &&
      at.completed !== at.current &&
      attached(socket) === undefined
    ) {
      takenOver.add(socket);
      takeOver(server, socket, raw, adopt);
      return;
    }
    // Node's own answer, after the answers to the requests before this one on the connection.
    takenOver.add(socket);
    const answer = () => {
      // Node's rule: no answer in the middle of a response that has begun (it would corrupt it).
      if (socket.writable && attached(socket)?.headersSent !== true) {
        socket.write(`HTTP/1.1 ${ANSWERS[error.code ?? ""] ?? "400 Bad Request"}\r\nConnection: close\r\n\r\n`);
      }
      socket.destroy(error);
    };
    afterResponses(socket, answer);
  });

  const adopt = (replay: Duplex) => replays.add(replay);
  return {
    chunkedOnly: (socket, head) => {
      takenOver.add(socket);
      takeOver(server, socket, head, adopt);
    },
  };
}

/**
 * Call `then` once every response on `socket` has closed (at once when none is attached), or
 * at once when the attached one's request is still being read: the refused bytes are then part
 * of that request's body, which never ends, so its response would wait for ever (until the idle
 * limit, or never without one) and hold the connection.
 */
function afterResponses(socket: Socket, then: () => void): void {
  const res = attached(socket);
  if (res === undefined || res.closed || !requestRead(res)) then();
  else res.once("close", () => afterResponses(socket, then));
}

/** Whether the request a response answers has been read to its end. */
function requestRead(res: ServerResponse): boolean {
  return (res as { req?: { complete: boolean } }).req?.complete !== false;
}

/**
 * Serve the connection's first request, whose head begins `first`, through a {@link HeadReplay}:
 * read the rest of its head, rewrite it (no `Content-Length`, `Connection: close`) and hand the
 * stream to the server.
 */
function takeOver(server: Http1Server, socket: Socket, first: Buffer, adopt: (replay: Duplex) => void): void {
  // Node's listeners served the refused parser; the socket is this function's now.
  for (const event of ["data", "end", "timeout", "drain"]) socket.removeAllListeners(event);
  const limit = (server as { maxHeaderSize?: number }).maxHeaderSize || maxHeaderSize;
  let head = first;
  const refuse = (status: string) => {
    if (socket.writable) socket.write(`HTTP/1.1 ${status}\r\nConnection: close\r\n\r\n`);
    socket.destroy();
  };
  const onTimeout = () => socket.destroy();
  const onData = (chunk: Buffer) => {
    head = head.byteLength === 0 ? chunk : Buffer.concat([head, chunk]);
    // llhttp skips empty lines before a request line; so does the search for the head's end.
    let start = 0;
    while (head[start] === 0x0d || head[start] === 0x0a) start++;
    const end = head.indexOf(HEAD_END, start);
    if (end < 0) {
      if (head.byteLength - start > limit) refuse("431 Request Header Fields Too Large");
      return;
    }
    socket.off("data", onData);
    socket.off("timeout", onTimeout);
    socket.pause();
    const lines = chunkedOnlyHead(head.subarray(start, end).toString("latin1"));
    if (lines === undefined) {
      refuse("400 Bad Request");
      return;
    }
    const replay = new HeadReplay(socket, Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"));
    const rest = head.subarray(end + HEAD_END.byteLength);
    if (rest.byteLength > 0) replay.push(rest);
    adopt(replay);
    server.emit("connection", replay);
  };
  socket.on("timeout", onTimeout);
  // Adding a 'data' listener moves the socket off the refused parser (Node unconsumes it).
  socket.on("data", onData);
  onData(Buffer.alloc(0));
}

/**
 * The lines of a head (without its closing blank line) as served chunked: without its
 * `Content-Length` and `Connection` lines, with `Connection: close`. Undefined unless the head is
 * HTTP/1.1, every line ends in CRLF (a bare CR or LF could hide where the head really ends), and
 * it has one `Transfer-Encoding`, `chunked`. RFC 9112 §6.1: an HTTP/1.0 message with
 * `Transfer-Encoding` has faulty framing, and its `Connection: keep-alive` would keep the
 * connection open past the body (Node's parser honours it over a later `close`).
 */
function chunkedOnlyHead(head: string): string[] | undefined {
  const lines = head.split("\r\n");
  if (!(lines[0] ?? "").endsWith(" HTTP/1.1") || lines.some((line) => /[\r\n]/.test(line))) return undefined;
  const codings = lines.filter((line) => /^transfer-encoding:/i.test(line));
  if (codings.length !== 1 || (codings[0] as string).slice(18).trim().toLowerCase() !== "chunked") return undefined;
  const kept = lines.filter((line) => !/^(content-length|connection):/i.test(line));
  kept.push("Connection: close");
  return kept;
}

/**
 * The stream the server reads one taken-over request from: a rewritten head, then the socket's
 * bytes; what the server writes goes to the socket. Timeouts, keep-alive and no-delay settings
 * are the socket's.
 */
class HeadReplay extends Duplex {
  constructor(
    readonly socket: Socket,
    head: Buffer,
  ) {
    super();
    this.push(head);
    socket.on("data", (chunk: Buffer) => {
      if (this.#stopped || !this.push(chunk)) socket.pause();
    });
    socket.on("end", () => this.push(null));
    // A socket the lean path handed over has no listener of Node's server: without this one a
    // reset would be an uncaught error.
    socket.on("error", () => this.destroy());
    socket.on("timeout", () => this.emit("timeout"));
    socket.once("close", () => this.destroy());
  }

  #stopped = false;

  /** Leave the socket's remaining bytes unread (TCP holds the client back) while the answer goes out. */
  stopReading(): void {
    this.#stopped = true;
    this.socket.pause();
  }

  override _read(): void {
    if (!this.#stopped) this.socket.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    this.socket.write(chunk, done);
  }

  override _final(done: (error?: Error | null) => void): void {
    this.socket.end(done);
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    this.socket.destroy();
    done(error);
  }

  setTimeout(ms: number, callback?: () => void): this {
    this.socket.setTimeout(ms);
    if (callback) this.once("timeout", callback);
    return this;
  }

  setNoDelay(noDelay?: boolean): this {
    this.socket.setNoDelay(noDelay);
    return this;
  }

  setKeepAlive(enable?: boolean, delay?: number): this {
    this.socket.setKeepAlive(enable, delay);
    return this;
  }

  get remoteAddress(): string | undefined {
    return this.socket.remoteAddress;
  }

  get remotePort(): number | undefined {
    return this.socket.remotePort;
  }
}
