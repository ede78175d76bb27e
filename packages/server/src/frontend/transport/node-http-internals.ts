// Node's HTTP server's private parts, in one place: the parser a connection's socket holds, its
// callback slots (published by `node:_http_common`), and the response a socket is writing.
// Nothing here is Node's public API; `node-http-internals.test.ts` checks, on the Node that runs
// the tests (CI runs them on every supported major), that each is still where this code reads it;
// where one is not, callers fall back to Node's own answer to a refused request.
import { HTTPParser } from "node:_http_common";
import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";

/**
 * The response `socket` is writing, if any: Node attaches a connection's responses to it one at a
 * time, in the order of their requests, queueing a pipelined one until the one before it has
 * finished (`_http_server.js`), so none is attached only when all have finished. Reading Node's
 * own `_httpMessage` slot when a request is refused spares every request a `request` listener
 * keeping its response (Node 20 to 26 keep the slot; `http-chunked-length.test.ts` holds it).
 */
export function attached(socket: Socket): ServerResponse | undefined {
  return (socket as unknown as { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
}

/** The number of the read the parser is executing, and of the reads in which a message last began and completed. */
export interface ParserReads {
  current: number;
  began: number;
  completed: number;
}

const PARSER_READS = new WeakMap<object, ParserReads>();
const COMPLETE_WRAPPERS = new WeakSet<object>();
const EXECUTE_WRAPPERS = new WeakSet<object>();

type ParserSlots = Record<number, ((...args: unknown[]) => unknown) | null | undefined>;

/**
 * Count the reads `socket`'s HTTP parser executes, noting in which one the latest message began
 * and the latest completed. Undefined where the parser's slots are not as expected.
 */
export function countParserReads(socket: Socket): ParserReads | undefined {
  const parser = (socket as unknown as { parser?: ParserSlots }).parser;
  const { kOnMessageBegin, kOnMessageComplete, kOnExecute } = HTTPParser as Record<string, number | undefined>;
  if (parser === undefined || kOnMessageBegin === undefined || kOnMessageComplete === undefined) return undefined;
  if (kOnExecute === undefined) return undefined;
  const begin = parser[kOnMessageBegin];
  const complete = parser[kOnMessageComplete];
  const execute = parser[kOnExecute];
  if (begin != null || typeof complete !== "function" || typeof execute !== "function") return undefined;
  const at: ParserReads = { current: 0, began: -1, completed: -1 };
  PARSER_READS.set(socket, at);
  parser[kOnMessageBegin] = () => {
    at.began = at.current;
  };
  // The parser is pooled and Node keeps this slot when it frees it: wrap once, find the socket's counts by the parser's socket.
  if (!COMPLETE_WRAPPERS.has(complete)) {
    const wrapper = function (this: { socket?: object }, ...args: unknown[]) {
      const counts = this.socket === undefined ? undefined : PARSER_READS.get(this.socket);
      if (counts) counts.completed = counts.current;
      return complete.apply(this, args);
    };
    COMPLETE_WRAPPERS.add(wrapper);
    parser[kOnMessageComplete] = wrapper;
  }
  parser[kOnExecute] = (...args: unknown[]) => {
    try {
      return execute(...args);
    } finally {
      at.current++;
    }
  };
  // Bytes fed from JavaScript (what the lean path read before it handed the connection over) go
  // through `parser.execute`, not through the native read that calls kOnExecute. Each such read
  // is counted too: uncounted, a head begun in it and refused in the next native read looked as
  // if it began there, and was rebuilt from that read alone (a header value became the request
  // line). A refusal of fed bytes comes after `execute` returns, when the count has moved on, so
  // it is never taken over: the lean path serves those itself (`chunkedOnly`).
  const methods = parser as unknown as { execute?: (...args: unknown[]) => unknown };
  const fed = methods.execute;
  if (typeof fed !== "function") return undefined;
  if (!EXECUTE_WRAPPERS.has(fed)) {
    const wrapper = function (this: { socket?: object }, ...args: unknown[]) {
      try {
        return fed.apply(this, args);
      } finally {
        const counts = this.socket === undefined ? undefined : PARSER_READS.get(this.socket);
        if (counts) counts.current++;
      }
    };
    EXECUTE_WRAPPERS.add(wrapper);
    methods.execute = wrapper;
  }
  return at;
}
