// The REST listener's time limits, over raw sockets: a request head that never completes, a body
// that stops flowing and a connection that says nothing are closed by the server; a slow but
// steady upload and a slow model are not; idle keep-alive connections are reaped.
import { mkdirSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { HttpFrontendOptions } from "../src/frontend/http/rest-frontend.js";
import {
  type HttpServer,
  removeTempRepositories,
  SIXTEEN,
  simpleInputs,
  startHttp,
  tempRepository,
} from "./http-fixture.js";

const servers: HttpServer[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  removeTempRepositories();
});

async function start(http: HttpFrontendOptions, models = ["simple"], repository?: string): Promise<HttpServer> {
  const server = await startHttp({
    ...(repository ? { modelRepositories: [repository] } : {}),
    controlMode: "explicit",
    loadModels: models,
    http,
  });
  servers.push(server);
  return server;
}

/** A connected socket, and a promise of everything it received once the server closes it. */
async function open(port: number): Promise<{ socket: Socket; closed: Promise<string> }> {
  const socket = connect(port, "127.0.0.1");
  let received = "";
  socket.setEncoding("latin1");
  socket.on("data", (text: string) => {
    received += text;
  });
  const closed = new Promise<string>((resolve, reject) => {
    socket.once("close", () => resolve(received));
    socket.once("error", (error: NodeJS.ErrnoException) => {
      // A reset is a close too; anything else is a failure of the test's own socket.
      if (error.code !== "ECONNRESET") reject(error);
    });
  });
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  return { socket, closed };
}

function inferHead(length: number): string {
  return (
    "POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
    `Content-Length: ${length}\r\n\r\n`
  );
}

describe("REST connection time limits", () => {
  it("closes a connection whose request head stops arriving, with 408", async () => {
    const { port } = await start({ headerTimeoutMs: 200 });
    const { socket, closed } = await open(port);
    socket.write("POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127");
    expect(await closed).toMatch(/^HTTP\/1\.1 408 /);
  });

  it("closes a connection whose request body stops flowing, without an answer", async () => {
    const { port } = await start({ idleTimeoutMs: 300 });
    const { socket, closed } = await open(port);
    socket.write(`${inferHead(1000)}{"inputs":`);
    expect(await closed).toBe("");
  });

  it("closes a connection that never sends a request", async () => {
    const { port } = await start({ idleTimeoutMs: 300 });
    const { closed } = await open(port);
    expect(await closed).toBe("");
  });

  it("lets a slow but steady upload finish", async () => {
    const { port } = await start({ headerTimeoutMs: 200, idleTimeoutMs: 1000 });
    const body = JSON.stringify({ inputs: simpleInputs() });
    const { socket, closed } = await open(port);
    socket.write(inferHead(body.length));
    // The client's pace is what is under test: each pause is well inside the idle limit, the whole
    // upload well past it and past the header limit.
    const pieces = 20;
    const size = Math.ceil(body.length / pieces);
    for (let at = 0; at < body.length; at += size) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.write(body.slice(at, at + size));
    }
    const answered = new Promise<string>((resolve) => {
      let text = "";
      socket.on("data", (chunk: string) => {
        text += chunk;
        if (text.includes("\r\n\r\n") && text.endsWith("}")) resolve(text);
      });
    });
    const reply = await answered;
    socket.end();
    await closed;
    expect(reply).toMatch(/^HTTP\/1\.1 200 /);
    expect(reply).toContain(`"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"data":[${SIXTEEN.map((i) => 2 * i)}]`);
  });

  it("does not cut a request while the model computes", async () => {
    const repository = tempRepository([]);
    const model = join(repository, "slow");
    mkdirSync(join(model, "1"), { recursive: true });
    writeFileSync(
      join(model, "config.pbtxt"),
      `name: "slow"\nbackend: "js"\nmax_batch_size: 0\n` +
        `input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]\n` +
        `output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]\n`,
    );
    // Three times the idle limit with no byte on the connection.
    writeFileSync(
      join(model, "1", "model.mjs"),
      `export default class { async execute(requests) {
        await new Promise((resolve) => setTimeout(resolve, 900));
        return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").data }] }));
      } }`,
    );
    const { port } = await start({ idleTimeoutMs: 300 }, ["slow"], repository);
    const body = JSON.stringify({ inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [7] }] });
    const { socket, closed } = await open(port);
    socket.write(
      `POST /v2/models/slow/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    const reply = await closed;
    expect(reply).toMatch(/^HTTP\/1\.1 200 /);
    expect(reply).toContain(`"name":"OUT","datatype":"INT32","shape":[1],"data":[7]`);
    socket.destroy();
  });

  it("closes an idle keep-alive connection after the keep-alive limit", async () => {
    const { port } = await start({ keepAliveTimeoutMs: 200 });
    const { socket, closed } = await open(port);
    socket.write("GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    expect(await closed).toMatch(/^HTTP\/1\.1 200 /);
  });
});
