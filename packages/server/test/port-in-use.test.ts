// A port that is taken fails `galley serve` at once, before any model loads, with Triton's one
// line (`failed to start HTTP service: Unavailable - Socket '127.0.0.1:P' already in use`), the flag
// that changes it and exit 1: no stack trace, no minute of loading first. Where another process
// takes the port while the models load, listen() rejects with the same error and closes what it
// had bound.
import { createServer as createNetServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { EndpointError } from "../src/endpoint-error.js";
import { createServer, type GalleyServer } from "../src/index.js";
import { gatedModel } from "./support/gated-model.js";
import { quietLog, tempRepository, waitFor } from "./support/harness.js";
import { killChildren, serveArgs, spawnCli } from "./support/process.js";

const occupied: Server[] = [];
let server: GalleyServer | undefined;
afterEach(async () => {
  killChildren();
  await server?.close();
  server = undefined;
  await Promise.all(occupied.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

/** A port some other program holds (a listener of this test, on loopback). */
async function takenPort(): Promise<number> {
  const holder = createNetServer();
  occupied.push(holder);
  await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
  return (holder.address() as { port: number }).port;
}

const listening = () => process.getActiveResourcesInfo().filter((r) => r === "TCPServerWrap").length;

describe("galley serve on a port in use", () => {
  it.each([
    ["HTTP", "http", "HTTP"],
    ["gRPC", "grpc", "GRPC"],
    ["metrics", "metrics", "Metrics"],
  ])("%s: one line naming the port and --%s-port, exit 1, no model loaded", async (_, flag, service) => {
    const port = await takenPort();
    const repo = tempRepository(["simple"]);
    const child = spawnCli(
      serveArgs(repo, [`--${flag}-port=${port}`, "--metrics-address=127.0.0.1", "--log-verbose=1"]),
    );
    expect(await child.exited).toBe(1);
    const lines = child.output().trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^E\\d{4} [\\d:.]+ \\d+ galley\\] failed to start ${service} service: Unavailable - Socket '127\\.0\\.0\\.1:${port}' already in use; choose another port with --${flag}-port \\(0 picks a free one\\)$`,
      ),
    );
    // Nothing about models at all: the check came first.
    expect(child.output()).not.toMatch(/simple|load/i);
  });

  it("two frontends given one port: the second is the one reported", async () => {
    const port = await takenPort();
    await new Promise((resolve) => occupied.pop()?.close(resolve));
    const child = spawnCli(serveArgs(tempRepository(["simple"]), [`--grpc-port=${port}`, `--http-port=${port}`]));
    expect(await child.exited).toBe(1);
    expect(child.output()).toMatch(
      /failed to start HTTP service: Unavailable - Socket '127\.0\.0\.1:\d+' already in use/,
    );
    expect(child.output()).not.toMatch(/successfully loaded/);
  });

  it("an address that is not this machine's names --*-address", async () => {
    // 192.0.2.0/24 is TEST-NET-1: never a local address.
    const child = spawnCli(serveArgs(tempRepository(["simple"]), ["--grpc-address=192.0.2.1"]));
    expect(await child.exited).toBe(1);
    expect(child.output()).toMatch(
      /failed to start GRPC service: Unavailable - Socket '192\.0\.2\.1:0': '192\.0\.2\.1' is not an address of this machine; choose another address with --grpc-address\n$/,
    );
  });
});

describe("listen() when the port is taken while the models load", () => {
  it("rejects with the EndpointError and leaves nothing listening", async () => {
    const repo = tempRepository(["simple"]);
    const slow = gatedModel(repo);
    const before = listening();
    const port = await takenPort();
    await new Promise((resolve) => occupied.pop()?.close(resolve));
    server = createServer({
      modelRepositories: [repo],
      log: quietLog(),
      exitTimeoutSecs: 5,
      grpc: { host: "127.0.0.1", port: 0 },
      http: { host: "127.0.0.1", port },
      metrics: false,
    });
    const started = server.listen();
    const core = server.core;
    await waitFor(async () => (await core.models.index()).some((m) => m.name === "slow" && m.state === "LOADING"), {
      what: "slow to be loading",
    });
    const thief = createNetServer();
    occupied.push(thief);
    await new Promise<void>((resolve) => thief.listen(port, "127.0.0.1", resolve));
    slow.open();
    const error = await started.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(EndpointError);
    expect((error as EndpointError).message).toBe(
      `failed to start HTTP service: Unavailable - Socket '127.0.0.1:${port}' already in use`,
    );
    expect((error as EndpointError).endpoint).toBe("http");
    // The gRPC listener bound before it is closed again; only the thief listens.
    // (Node lists a closed listener a little while after its close.)
    await waitFor(async () => listening() === before + 1, { what: "the bound listeners to close" });
  });
});
