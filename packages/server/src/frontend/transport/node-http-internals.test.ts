// The private parts of Node's HTTP server that node-http-internals.ts reads, checked on the Node
// that runs this test (CI runs the server's tests on every supported major): if a major moves
// one, this fails by name rather than the REST port quietly losing what it is for.
import { HTTPParser } from "node:_http_common";
import { createServer, type ServerResponse } from "node:http";
import { type AddressInfo, connect, type Socket } from "node:net";
import { describe, expect, it } from "vitest";
import { attached, countParserReads, type ParserReads } from "./node-http-internals.js";

describe(`Node ${process.version}'s HTTP internals`, () => {
  it("publishes the parser's callback slots", () => {
    const slots = HTTPParser as unknown as Record<string, unknown>;
    for (const name of ["kOnMessageBegin", "kOnMessageComplete", "kOnExecute"])
      expect(typeof slots[name], name).toBe("number");
  });

  it("gives a connection's socket its parser, whose reads are counted, and attaches the response being written", async () => {
    let reads: ParserReads | undefined;
    let during: ServerResponse | undefined;
    let socket: Socket | undefined;
    const server = createServer((_req, res) => {
      during = attached(res.socket as Socket);
      res.end("ok");
    });
    server.on("connection", (s: Socket) => {
      socket = s;
      reads = countParserReads(s);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const client = connect((server.address() as AddressInfo).port, "127.0.0.1");
    await new Promise<void>((resolve) => client.once("connect", () => resolve()));
    // Two requests in two writes, each answered before the next is sent: two reads, two messages.
    for (const path of ["/a", "/b"]) {
      const answered = new Promise<void>((resolve) => client.once("data", () => resolve()));
      client.write(`GET ${path} HTTP/1.1\r\nHost: h\r\n\r\n`);
      await answered;
    }
    // The slots are where the counting expects them (it returns undefined where they are not).
    expect(reads).toBeDefined();
    expect(reads?.current).toBe(2);
    expect(reads?.began).toBe(1);
    expect(reads?.completed).toBe(1);
    // While a response is written it is the socket's; once finished, none is.
    expect(during).toBeDefined();
    expect(attached(socket as Socket)).toBeUndefined();
    client.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
});
