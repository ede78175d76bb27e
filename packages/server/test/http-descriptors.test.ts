// Uploads cut short do not cost descriptors: `galley serve`, limited by prlimit to a few more
// descriptors than it uses, is sent three times that many requests whose bodies end early (the
// client's FIN) or cannot be parsed. Each is answered 400 and its connection closed at once, as
// Node's own server does; before, each held its descriptor for the idle limit (for ever without
// one), so that a client holding no socket locked the server out of REST and gRPC.
import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { connect } from "node:net";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { EXAMPLES } from "./http-fixture.js";
import { killChildren, spawnCli } from "./support/process.js";

afterEach(() => killChildren());

/** Write `bytes` (then FIN when `fin`), and resolve with what the server sent once it closes. */
function upload(port: number, bytes: string, fin: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => {
      if (fin) socket.end(bytes);
      else socket.write(bytes);
    });
    let received = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      received += chunk;
    });
    socket.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code !== "ECONNRESET") reject(error);
    });
    socket.on("close", () => resolve(received));
  });
}

const HEAD = "POST /v2/models/simple/infer HTTP/1.1\r\nHost: h\r\n";
const CUT_SHORT: [string, boolean][] = [
  [`${HEAD}Content-Length: 100\r\nConnection: close\r\n\r\nab`, true],
  [`${HEAD}Content-Length: 100\r\n\r\nab`, true],
  [`${HEAD}Transfer-Encoding: chunked\r\n\r\n5\r\nab`, true],
  [`${HEAD}Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n`, false],
  [`${HEAD}Transfer-Encoding: chunked\r\n\r\n3\r\nabcX`, false],
  [`${HEAD}Transfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`, false],
];

describe("REST uploads cut short, under a descriptor limit", () => {
  it("are each answered 400 and closed at once, and the server keeps serving REST and gRPC", async () => {
    const cli = spawnCli([
      "serve",
      "--model-repository",
      EXAMPLES,
      "--model-control-mode=explicit",
      "--load-model=simple",
      "--http-address=127.0.0.1",
      "--grpc-address=127.0.0.1",
      "--http-port=0",
      "--grpc-port=0",
      "--allow-metrics=false",
      // No idle limit: only the answer ends such a connection.
      "--http-idle-timeout-secs=0",
      "--exit-timeout-secs=5",
    ]);
    const [, http] = await cli.waitFor(/Started HTTPService at \S+:(\d+)/);
    const [, grpc] = await cli.waitFor(/Started GRPCInferenceService at (\S+)/);
    await cli.waitFor(/Ready: /);
    const pid = cli.child.pid as number;
    const open = readdirSync(`/proc/${pid}/fd`).length;
    const limit = open + 64;
    execFileSync("prlimit", [`--pid=${pid}`, `--nofile=${limit}:${limit}`]);

    const total = 3 * limit;
    const answers: string[] = [];
    for (let sent = 0; sent < total; ) {
      const batch: Promise<string>[] = [];
      for (let i = 0; i < 32 && sent < total; i++, sent++) {
        const [bytes, fin] = CUT_SHORT[sent % CUT_SHORT.length] as [string, boolean];
        batch.push(upload(Number(http), bytes, fin));
      }
      answers.push(...(await Promise.all(batch)));
    }
    expect(answers).toHaveLength(total);
    for (const answer of answers) expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);

    const ready = await fetch(`http://127.0.0.1:${http}/v2/health/ready`);
    expect(ready.status).toBe(200);
    const client = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://${grpc}` }));
    expect((await client.serverReady({})).ready).toBe(true);
    expect(readdirSync(`/proc/${pid}/fd`).length).toBeLessThan(limit);

    cli.child.kill("SIGTERM");
    expect(await cli.exited).toBe(0);
  }, 60_000);
});
