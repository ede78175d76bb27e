// A REST request whose head has both `Transfer-Encoding: chunked` and `Content-Length` (what
// Python's requests sends for a generator body given a length header), over a raw socket: the
// chunked body is read, Content-Length is ignored, and the connection closes after the answer
// (RFC 9112 §6.1, §6.3), so bytes hidden after the body's last chunk are never served.
import { connect } from "node:net";
import { beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, SIXTEEN, send, simpleInputs, startHttp } from "./http-fixture.js";

let server: HttpServer;

beforeAll(async () => {
  server = await startHttp({ controlMode: "explicit", loadModels: ["simple"] });
  return () => server.close();
});

/** Write `bytes` on a new connection and collect everything the server sends until it closes it. */
function exchange(bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, "127.0.0.1", () => socket.write(bytes));
    let received = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      received += chunk;
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
  });
}

/**
 * On one connection, write `first`, wait for its whole answer, then write `second`; everything the
 * server sends until it closes the connection.
 */
function keptAlive(first: string, second: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, "127.0.0.1", () => socket.write(first));
    let received = "";
    let sent = false;
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      received += chunk;
      if (!sent && responses(received).length === 1 && complete(received)) {
        sent = true;
        socket.write(second);
      }
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
  });
}

/** Whether `raw` ends with a response's whole body. */
function complete(raw: string): boolean {
  const headEnd = raw.indexOf("\r\n\r\n");
  if (headEnd < 0) return false;
  const length = Number(/content-length: *(\d+)/i.exec(raw.slice(0, headEnd))?.[1] ?? 0);
  return raw.length >= headEnd + 4 + length;
}

/** `text` in two chunks, then the last chunk. */
function chunked(text: string): string {
  const half = Math.floor(text.length / 2);
  const chunk = (part: string) => `${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`;
  return `${chunk(text.slice(0, half))}${chunk(text.slice(half))}0\r\n\r\n`;
}

const INFER = JSON.stringify({ inputs: simpleInputs() });
const SUM = SIXTEEN.map((v) => 2 * v);

/** The status line, headers and JSON body of each response in `raw`. */
function responses(raw: string): { status: string; headers: string[]; body: unknown }[] {
  const out: { status: string; headers: string[]; body: unknown }[] = [];
  let rest = raw;
  while (rest.length > 0) {
    const headEnd = rest.indexOf("\r\n\r\n");
    const [status = "", ...headers] = rest.slice(0, headEnd).split("\r\n");
    const length = Number(headers.find((h) => /^content-length:/i.test(h))?.split(":")[1] ?? 0);
    const body = rest.slice(headEnd + 4, headEnd + 4 + length);
    out.push({ status, headers: headers.map((h) => h.toLowerCase()), body: body ? JSON.parse(body) : undefined });
    rest = rest.slice(headEnd + 4 + length);
  }
  return out;
}

function outputSum(body: unknown): unknown {
  return (body as { outputs: { name: string; data: number[] }[] }).outputs.find((o) => o.name === "OUTPUT0")?.data;
}

/**
 * A plain request of `simple` (the lean HTTP/1 path's), the same request as Node's parser reads it
 * (the lean path leaves a `Content-Encoding` to Node), and one with both `Transfer-Encoding:
 * chunked` and `Content-Length`.
 */
const plain = `POST /v2/models/simple/infer HTTP/1.1\r\nHost: galley\r\nContent-Length: ${INFER.length}\r\n\r\n${INFER}`;
const parsedByNode = plain.replace("Host: galley\r\n", "Host: galley\r\nContent-Encoding: identity\r\n");
const both = `POST /v2/models/simple/infer HTTP/1.1\r\nHost: galley\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(INFER)}`;

describe("a request with both Transfer-Encoding: chunked and Content-Length", () => {
  it("is read chunked, whichever header comes first, answered, and its connection closed", async () => {
    const heads = [
      "Transfer-Encoding: chunked\r\nContent-Length: 3",
      "Content-Length: 3\r\nTransfer-Encoding: chunked",
    ];
    for (const lengths of heads) {
      const raw = await exchange(
        `POST /v2/models/simple/infer HTTP/1.1\r\nHost: galley\r\n${lengths}\r\n\r\n${chunked(INFER)}`,
      );
      const [answer, ...more] = responses(raw);
      expect(more).toEqual([]);
      expect(answer?.status).toBe("HTTP/1.1 200 OK");
      expect(answer?.headers).toContain("connection: close");
      expect(outputSum(answer?.body)).toEqual(SUM);
    }
  });

  it("never serves a request hidden after the body's last chunk, though Content-Length covers it", async () => {
    const body = chunked(INFER);
    const hidden = "POST /v2/repository/models/simple/unload HTTP/1.1\r\nHost: galley\r\nContent-Length: 0\r\n\r\n";
    const raw = await exchange(
      `POST /v2/models/simple/infer HTTP/1.1\r\nHost: galley\r\nTransfer-Encoding: chunked\r\nContent-Length: ${
        body.length + hidden.length
      }\r\n\r\n${body}${hidden}`,
    );
    // One answer, to the inference, whose body was the chunked one (read by Content-Length it
    // would not be JSON); the hidden unload was not run.
    const answers = responses(raw);
    expect(answers.map((a) => a.status)).toEqual(["HTTP/1.1 200 OK"]);
    expect(outputSum(answers[0]?.body)).toEqual(SUM);
    const ready = await send(server.port, "GET", "/v2/models/simple/ready");
    expect(ready.status).toBe(200);
  });

  it("is served after other requests on a kept-alive connection (a requests.Session)", async () => {
    const answers = responses(await keptAlive(plain, both));
    expect(answers.map((a) => a.status)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 200 OK"]);
    expect(answers[1]?.headers).toContain("connection: close");
    expect(answers.map((a) => outputSum(a.body))).toEqual([SUM, SUM]);
  });

  it("answers the request before it, then keeps Node's 400 when they share a read (where its head starts is not known)", async () => {
    const answers = responses(await exchange(`${parsedByNode}${both}`));
    expect(answers.map((a) => a.status)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request"]);
    expect(outputSum(answers[0]?.body)).toEqual(SUM);
  });

  it("answers every pipelined request before it, in order, then Node's 400", async () => {
    const answers = responses(await exchange(`${parsedByNode}${plain}${plain}${both}`));
    expect(answers.map((a) => a.status)).toEqual([
      "HTTP/1.1 200 OK",
      "HTTP/1.1 200 OK",
      "HTTP/1.1 200 OK",
      "HTTP/1.1 400 Bad Request",
    ]);
    expect(answers.slice(0, 3).map((a) => outputSum(a.body))).toEqual([SUM, SUM, SUM]);
  });

  it("is served after lean requests in the same read: the lean path hands the connection over at its first byte", async () => {
    const answers = responses(await exchange(`${plain}${plain}${both}`));
    expect(answers.map((a) => a.status)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK"]);
    expect(answers[2]?.headers).toContain("connection: close");
    expect(answers.map((a) => outputSum(a.body))).toEqual([SUM, SUM, SUM]);
  });
});
