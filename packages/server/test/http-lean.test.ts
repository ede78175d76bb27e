// The lean HTTP/1 path (src/frontend/http1-lean.ts) over raw sockets: it answers as Node's server
// does, serves pipelined requests and bodies split across reads in order, hands a connection to
// Node at its first other request, keeps Node's time limits, and cancels a request whose client
// goes away.
import { connect, type Socket } from "node:net";
import { gunzipSync } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import type { InferenceServer, ModelView } from "../src/core/inference-server.js";
import { TraceFiles } from "../src/core/trace-files.js";
import { DEFAULT_TRACE_CONFIG, TraceSettings } from "../src/core/trace-settings.js";
import { createRestFrontend, type HttpFrontendOptions } from "../src/frontend/http/rest-frontend.js";
import { listenHttp1 } from "../src/frontend/transport/listen-http1.js";
import type { Listener } from "../src/frontend/transport/listener.js";
import { binaryBody, type HttpServer, int32Bytes, SIXTEEN, simpleInputs, startHttp } from "./http-fixture.js";
import { abortingCore } from "./support/aborting-core.js";

const servers: HttpServer[] = [];
const listeners: Listener[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(listeners.splice(0).map((l) => l.close(0)));
});

async function start(http: HttpFrontendOptions = {}): Promise<number> {
  const server = await startHttp({ controlMode: "explicit", loadModels: ["simple"], http });
  servers.push(server);
  return server.port;
}

/** One response read off a connection. */
interface Response {
  status: string;
  headers: string[];
  body: Buffer;
}

/** A connection that collects whole responses, and tells when the server closes it. */
class Connection {
  readonly socket: Socket;
  readonly closed: Promise<void>;
  #received = Buffer.alloc(0);
  #waiting: (() => void) | undefined;

  constructor(port: number) {
    this.socket = connect(port, "127.0.0.1");
    this.socket.on("data", (chunk: Buffer) => {
      this.#received = Buffer.concat([this.#received, chunk]);
      this.#waiting?.();
    });
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    this.socket.on("error", () => undefined);
  }

  /** The next `count` responses (each head with its Content-Length body). */
  async responses(count: number): Promise<Response[]> {
    const out: Response[] = [];
    while (out.length < count) {
      const response = this.#take();
      if (response) {
        out.push(response);
        continue;
      }
      await new Promise<void>((resolve, reject) => {
        this.#waiting = resolve;
        this.closed.then(() => reject(new Error(`closed after ${out.length} of ${count} responses`)));
      });
    }
    return out;
  }

  #take(): Response | undefined {
    const end = this.#received.indexOf("\r\n\r\n");
    if (end < 0) return undefined;
    const [status = "", ...headers] = this.#received.subarray(0, end).toString("latin1").split("\r\n");
    const length = Number(headers.find((h) => /^content-length:/i.test(h))?.split(":")[1] ?? 0);
    if (this.#received.length < end + 4 + length) return undefined;
    const body = this.#received.subarray(end + 4, end + 4 + length);
    this.#received = this.#received.subarray(end + 4 + length);
    return { status, headers, body };
  }
}

const JSON_BODY = JSON.stringify({ inputs: simpleInputs() });
const SUM = SIXTEEN.map((v) => 2 * v);

/** An infer request's bytes; `extra` header lines go after `Host`. */
function infer(body: string | Buffer, extra: string[] = [], model = "simple"): Buffer {
  const head = [`POST /v2/models/${model}/infer HTTP/1.1`, "Host: galley", ...extra, `Content-Length: ${body.length}`];
  return Buffer.concat([Buffer.from(`${head.join("\r\n")}\r\n\r\n`, "latin1"), Buffer.from(body)]);
}
/** The lean path leaves a request with `Content-Encoding` to Node's server. */
const NODE = ["Content-Encoding: identity"];

function sum(response: Response | undefined): unknown {
  const body = JSON.parse(response?.body.toString() ?? "") as { outputs: { name: string; data: number[] }[] };
  return body.outputs.find((o) => o.name === "OUTPUT0")?.data;
}

describe("the lean HTTP/1 path", () => {
  it("answers as Node's server does, byte for byte but the date", async () => {
    const port = await start({ keepAliveTimeoutMs: 7000 });
    const binary = binaryBody(
      {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
        ],
        outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }, { name: "OUTPUT1" }],
      },
      [int32Bytes(SIXTEEN), int32Bytes(SIXTEEN)],
    );
    const cases: [string, (extra: string[]) => Buffer][] = [
      ["JSON", (extra) => infer(JSON_BODY, extra)],
      ["binary", (extra) => infer(binary.body, [`Inference-Header-Content-Length: ${binary.headerLength}`, ...extra])],
      ["gzip reply", (extra) => infer(JSON_BODY, ["Accept-Encoding: gzip", ...extra])],
      ["unknown model", (extra) => infer(JSON_BODY, extra, "nope")],
      ["unknown version", (extra) => infer(JSON_BODY, extra, "simple/versions/9")],
      ["bad JSON", (extra) => infer('{"inputs":[', extra)],
      ["wrong shape", (extra) => infer(JSON_BODY.replace("[1,16]", "[2,16]"), extra)],
    ];
    for (const [name, request] of cases) {
      const lean = new Connection(port);
      const node = new Connection(port);
      lean.socket.write(request([]));
      node.socket.write(request(NODE));
      const [[a], [b]] = await Promise.all([lean.responses(1), node.responses(1)]);
      const undated = (r: Response | undefined) => ({
        ...r,
        headers: r?.headers.filter((h) => !h.startsWith("Date:")),
      });
      expect(undated(a), name).toEqual(undated(b));
      expect(
        a?.headers.some((h) => /^Date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$/.test(h)),
        name,
      ).toBe(true);
      lean.socket.destroy();
      node.socket.destroy();
    }
    const gzip = new Connection(port);
    gzip.socket.write(infer(JSON_BODY, ["Accept-Encoding: gzip"]));
    const [zipped] = await gzip.responses(1);
    expect(zipped?.headers).toContain("Content-Encoding: gzip");
    expect(sum({ ...(zipped as Response), body: gunzipSync(zipped?.body as Buffer) })).toEqual(SUM);
    gzip.socket.destroy();
  });

  it("serves pipelined requests in order, a body split across reads, then hands over at the first other request", async () => {
    const port = await start();
    const connection = new Connection(port);
    const second = infer(JSON_BODY);
    const cut = second.length - 20;
    connection.socket.write(Buffer.concat([infer(JSON_BODY), second.subarray(0, cut)]));
    const first = await connection.responses(1);
    connection.socket.write(
      Buffer.concat([
        second.subarray(cut),
        Buffer.from("GET /v2/health/ready HTTP/1.1\r\nHost: galley\r\n\r\n"),
        infer(JSON_BODY),
        infer(JSON_BODY, NODE),
      ]),
    );
    const rest = await connection.responses(4);
    expect([...first, ...rest].map((r) => r.status)).toEqual(Array(5).fill("HTTP/1.1 200 OK"));
    expect([first[0], rest[0], rest[2], rest[3]].map(sum)).toEqual([SUM, SUM, SUM, SUM]);
    expect(rest[1]?.body.length).toBe(0);
    connection.socket.destroy();
  });

  it("leaves a head split across reads to Node's server, which answers it", async () => {
    const port = await start();
    const connection = new Connection(port);
    const request = infer(JSON_BODY);
    connection.socket.write(request.subarray(0, 30));
    // The client's own pace; the server waits for the rest of the head either way.
    await new Promise((resolve) => setTimeout(resolve, 50));
    connection.socket.write(request.subarray(30));
    expect(sum((await connection.responses(1))[0])).toEqual(SUM);
    connection.socket.destroy();
  });

  it("keeps Node's limits: the body limit, the idle limit on a body, the keep-alive limit", async () => {
    const port = await start({ maxInputSize: 100, idleTimeoutMs: 300, keepAliveTimeoutMs: 1000 });
    const large = new Connection(port);
    large.socket.write(infer(JSON_BODY));
    const [refused] = await large.responses(1);
    expect(refused?.status).toBe("HTTP/1.1 400 Bad Request");
    expect(JSON.parse(refused?.body.toString() ?? "")).toEqual({
      error: `request JSON size of ${JSON_BODY.length} bytes exceeds the maximum allowed input size of 100 bytes. Use --http-max-input-size to increase the limit.`,
    });
    large.socket.destroy();

    const stalled = new Connection(port);
    stalled.socket.write(
      'POST /v2/models/simple/infer HTTP/1.1\r\nHost: galley\r\nContent-Length: 50\r\n\r\n{"inputs":',
    );
    await stalled.closed;

    const small = JSON.stringify({ inputs: [] });
    const idle = new Connection(port);
    idle.socket.write(infer(small));
    const [answered] = await idle.responses(1);
    expect(answered?.headers).toContain("Keep-Alive: timeout=1");
    await idle.closed;
  });
});

describe("the lean HTTP/1 path over a stand-in core", () => {
  const model = { decoupled: false, config: { input: [], maxBatchSize: 0 } } as unknown as ModelView;
  const body = JSON.stringify({ inputs: [{ name: "X", shape: [1], datatype: "INT32", data: [1] }] });

  async function serve(core: Partial<InferenceServer>): Promise<number> {
    const tracing = new TraceSettings(DEFAULT_TRACE_CONFIG, new TraceFiles(() => {}));
    const log = { error: () => undefined } as unknown as InferenceServer["log"];
    const server = { accepting: true, tracing, log, ...core } as InferenceServer;
    const rest = createRestFrontend(server);
    const listener = await listenHttp1(rest, "127.0.0.1", 0);
    listeners.push(listener);
    return listener.address.port;
  }

  it("cancels the request (aborts its signal) when the client disconnects", async () => {
    const { core, started, aborted } = abortingCore(model);
    const connection = new Connection(await serve(core));
    connection.socket.write(infer(body, [], "m"));
    void started.then(() => connection.socket.destroy());
    expect(await aborted).toBe(true);
  });

  it("answers a bug in the core with 500 and no JavaScript text, and serves the next request", async () => {
    let calls = 0;
    const port = await serve({
      model: () => model,
      inferenceModel: () => model,
      infer: async () => {
        calls++;
        if (calls === 1) throw new TypeError("x is not a function");
        return { modelName: "m", modelVersion: "1", id: "", parameters: {}, outputs: [] };
      },
    });
    const connection = new Connection(port);
    connection.socket.write(Buffer.concat([infer(body, [], "m"), infer(body, [], "m")]));
    const [failed, next] = await connection.responses(2);
    expect(failed?.status).toBe("HTTP/1.1 500 Internal Server Error");
    expect(failed?.body.toString()).not.toContain("x is not a function");
    expect(next?.status).toBe("HTTP/1.1 200 OK");
    connection.socket.destroy();
  });

  it("starts the next pipelined request only once a large reply has left, whatever arrives meanwhile", async () => {
    const unreleased: (() => void)[] = [];
    // Larger than loopback's socket buffers (up to 4 MiB sent, 32 MiB received), so the reply
    // waits on the client while it does not read.
    const big = new Uint8Array(64 * 1024 * 1024);
    const port = await serve({
      model: () => model,
      inferenceModel: () => model,
      infer: (request) =>
        new Promise((resolve) => {
          const id = request.id ?? "";
          const data = id === "a" ? big : new Uint8Array(4);
          const output = { name: "OUT", datatype: "UINT8" as const, shape: [data.length], data, parameters: {} };
          unreleased.push(() => resolve({ modelName: "m", modelVersion: "1", id, parameters: {}, outputs: [output] }));
        }),
    });
    const request = (id: string) => {
      const inputs = [{ name: "X", shape: [1], datatype: "INT32", data: [1] }];
      return infer(JSON.stringify({ id, inputs, parameters: { binary_data_output: true } }), [], "m");
    };
    const turns = async (n: number) => {
      for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => undefined);
    const ids = answeredIds(socket);
    socket.write(Buffer.concat([request("a"), request("b")]));
    while (unreleased.length === 0) await turns(1);
    socket.pause();
    unreleased.shift()?.();
    await turns(20);
    // c arrives while a's reply has not all left.
    socket.write(request("c"));
    await turns(20);
    socket.resume();
    // Nothing is released until a's reply has come whole (so it has all left the server).
    while (ids.received() === 0) await turns(1);
    await turns(10);
    let done = false;
    void ids.promise.then(() => {
      done = true;
    });
    while (!done) {
      await turns(5);
      // The newest first: two requests running at once would be answered out of order.
      unreleased.pop()?.();
    }
    expect(await ids.promise).toEqual(["a", "b", "c"]);
    socket.destroy();
  });

  it("serves, in order, requests that trickle in a byte at a time while one runs", async () => {
    const releases: (() => void)[] = [];
    let started!: () => void;
    const first = new Promise<void>((resolve) => {
      started = resolve;
    });
    const answered: string[] = [];
    const port = await serve({
      model: () => model,
      inferenceModel: () => model,
      infer: (request) =>
        new Promise((resolve) => {
          started();
          const id = request.id ?? "";
          releases.push(() => {
            answered.push(id);
            resolve({ modelName: "m", modelVersion: "1", id, parameters: {}, outputs: [] });
          });
        }),
    });
    const withId = (id: string) =>
      JSON.stringify({ id, inputs: [{ name: "X", shape: [1], datatype: "INT32", data: [1] }] });
    const connection = new Connection(port);
    connection.socket.setNoDelay(true);
    connection.socket.write(infer(withId("a"), [], "m"));
    await first;
    // Each byte on its own turn of the loop, so that the server reads most of them one by one.
    const trickled = Buffer.concat([infer(withId("b"), [], "m"), infer(withId("c"), [], "m")]);
    for (const byte of trickled) {
      await new Promise<void>((resolve) => connection.socket.write(Buffer.from([byte]), () => setImmediate(resolve)));
    }
    // The server holds the trickle until the running request is answered; then one at a time.
    expect(releases).toHaveLength(1);
    const replies = connection.responses(3);
    for (let i = 0; i < 3; i++) {
      while (releases.length <= i) await new Promise((resolve) => setImmediate(resolve));
      releases[i]?.();
    }
    const bodies = (await replies).map((r) => [r.status, JSON.parse(r.body.toString()).id]);
    expect(bodies).toEqual([
      ["HTTP/1.1 200 OK", "a"],
      ["HTTP/1.1 200 OK", "b"],
      ["HTTP/1.1 200 OK", "c"],
    ]);
    expect(answered).toEqual(["a", "b", "c"]);
    connection.socket.destroy();
  });
});

/**
 * The `id`s of the first three binary-output replies on `socket`, read as they stream by (a reply
 * may be tens of MiB: only heads and JSON headers are kept), and how many replies have come whole.
 */
function answeredIds(socket: Socket): { promise: Promise<string[]>; received: () => number } {
  const ids: string[] = [];
  let received = 0;
  let held: Buffer = Buffer.alloc(0);
  let skip = 0;
  return {
    received: () => received,
    promise: new Promise((resolve, reject) => {
      socket.on("data", (chunk: Buffer) => {
        let data = chunk;
        for (;;) {
          if (skip > 0) {
            const n = Math.min(skip, data.length);
            skip -= n;
            data = data.subarray(n);
            if (skip > 0) return;
            received++;
          }
          held = held.length > 0 ? Buffer.concat([held, data]) : data;
          data = Buffer.alloc(0);
          const end = held.indexOf("\r\n\r\n");
          if (end < 0) return;
          const head = held.subarray(0, end).toString("latin1");
          const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1]);
          const jsonLength = Number(/\r\ninference-header-content-length: *(\d+)/i.exec(head)?.[1]);
          if (held.length < end + 4 + jsonLength) return;
          ids.push(JSON.parse(held.subarray(end + 4, end + 4 + jsonLength).toString()).id);
          if (ids.length === 3) return resolve(ids);
          skip = end + 4 + length;
          data = held;
          held = Buffer.alloc(0);
        }
      });
      socket.once("close", () => reject(new Error(`closed after ${ids.join(", ")}`)));
    }),
  };
}
