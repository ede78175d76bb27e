// Graceful shutdown with requests in flight: every request the server accepted before close()
// (or SIGTERM) is answered, new ones are refused, the port stops accepting connections, and the
// CLI exits 0.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  fp32Bytes,
  type InferenceClient,
  range,
  readFp32,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";
import { killChildren, serveArgs, spawnCli, tryConnect } from "./support/process.js";

afterEach(async () => {
  killChildren();
  await cleanup();
});

const GATED = { model: "gated", version: "1" };
/** gated's max_batch_size: a request of 64 rows always runs alone. */
const ROWS = 64;

/**
 * A repository with `gated`: one instance whose `execute` waits until the file `gate` exists, so
 * the first request holds the instance and every other one stays queued until the test opens the
 * gate: in flight at shutdown for certain, whatever the machine's speed. Each output row is the
 * first 10 values of its input row.
 */
function gatedRepository(): { repo: string; gate: string } {
  const repo = tempRepository([]);
  const gate = join(repo, "gate");
  mkdirSync(join(repo, "gated", "1"), { recursive: true });
  writeFileSync(
    join(repo, "gated", "config.pbtxt"),
    `name: "gated"
backend: "js"
max_batch_size: ${ROWS}
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]
`,
  );
  writeFileSync(
    join(repo, "gated", "1", "model.mjs"),
    `import { existsSync } from "node:fs";
export default class {
  async execute(requests) {
    while (!existsSync(${JSON.stringify(gate)})) await new Promise((resolve) => setTimeout(resolve, 5));
    return requests.map((r) => {
      const input = r.input("INPUT");
      const rows = input.shape[0];
      const data = new Float32Array(rows * 10);
      const values = input.typed();
      for (let i = 0; i < rows; i++) data.set(values.subarray(i * 64, i * 64 + 10), i * 10);
      return { outputs: [{ name: "OUTPUT", datatype: "FP32", shape: [rows, 10], data }] };
    });
  }
}
`,
  );
  return { repo, gate };
}
const CALLS = 200;

type Outcome = { ok: true; id: string; rows: number } | { ok: false; error: string };

/** Start `CALLS` ModelInfer calls of 64 rows each on gated; each resolves to its outcome. */
function startCalls(client: InferenceClient): Promise<Outcome>[] {
  const input = fp32Bytes(range(ROWS * 64).map((i) => Math.cos(i / 7)));
  return range(CALLS).map((i) =>
    client
      .modelInfer({
        modelName: "gated",
        id: `call-${i}`,
        inputs: [{ name: "INPUT", datatype: "FP32", shape: [BigInt(ROWS), 64n] }],
        rawInputContents: [input],
      })
      .then(
        (response): Outcome => ({
          ok: true,
          id: response.id,
          rows: readFp32(response.rawOutputContents[0]).length / 10,
        }),
        (error: unknown): Outcome => ({
          ok: false,
          error: error instanceof ConnectError ? `${Code[error.code]}: ${error.rawMessage}` : String(error),
        }),
      ),
  );
}

/**
 * Wait, on the metrics endpoint, until the server has received all `CALLS` requests: the first
 * holds gated's one instance at the gate and the others are queued behind it.
 */
async function waitUntilAllReceivedAndQueued(metricsUrl: string): Promise<number> {
  let pending = 0;
  await waitFor(
    async () => {
      pending = sampleValue(await scrape(metricsUrl), "nv_inference_pending_request_count", GATED);
      return pending === CALLS - 1;
    },
    { intervalMs: 5, what: "every request to be received, all but one queued" },
  );
  return pending;
}

function expectAllAnswered(outcomes: Outcome[]): void {
  expect(outcomes.filter((o) => !o.ok)).toEqual([]);
  expect(outcomes.map((o) => (o.ok ? o.id : ""))).toEqual(range(CALLS).map((i) => `call-${i}`));
  expect(outcomes.every((o) => o.ok && o.rows === ROWS)).toBe(true);
}

describe("server.close() with requests in flight", () => {
  it("answers every request accepted before close(), refuses new ones, and stops accepting connections", async () => {
    const { repo, gate } = gatedRepository();
    const { client, server, grpcUrl, grpcPort, metricsUrl } = await startServer({
      modelRepositories: [repo],
      metrics: true,
      exitTimeoutSecs: 30,
    });
    const calls = startCalls(client);
    const queued = await waitUntilAllReceivedAndQueued(metricsUrl as string);
    expect(queued).toBeGreaterThan(0);

    const closing = server.close();
    expect(server.core.isReady()).toBe(false);
    // A new connection after close() began is refused.
    const late = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: grpcUrl }));
    const refused = await late.serverLive({}).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.Unavailable);

    writeFileSync(gate, "");
    expectAllAnswered(await Promise.all(calls));
    await closing;
    expect(server.core.isLive()).toBe(false);
    expect(await tryConnect(grpcPort)).toBe("ECONNREFUSED");
    expect(await tryConnect(Number(new URL(metricsUrl as string).port))).toBe("ECONNREFUSED");
  }, 60_000);
});

describe("galley serve and SIGTERM", () => {
  it("answers the requests in flight, then exits 0 and frees its ports", async () => {
    const { repo, gate } = gatedRepository();
    const cli = spawnCli(serveArgs(repo));
    const [, grpcAddress] = await cli.waitFor(/Started GRPCInferenceService at (\S+)/);
    const [, metricsAddress] = await cli.waitFor(/Started Metrics Service at (\S+)/);
    const [, httpAddress] = await cli.waitFor(/Started HTTPService at (\S+)/);
    const client = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://${grpcAddress}` }));
    expect((await client.serverReady({})).ready).toBe(true);

    const calls = startCalls(client);
    expect(await waitUntilAllReceivedAndQueued(`http://${metricsAddress}`)).toBeGreaterThan(0);
    cli.child.kill("SIGTERM");
    await cli.waitFor(/Received SIGTERM/);
    writeFileSync(gate, "");

    expectAllAnswered(await Promise.all(calls));
    expect(await cli.exited).toBe(0);
    expect(cli.output()).toMatch(/Received SIGTERM/);
    expect(cli.output()).toMatch(/Server stopped/);
    for (const address of [grpcAddress, metricsAddress, httpAddress]) {
      expect(await tryConnect(Number(address?.split(":").pop()))).toBe("ECONNREFUSED");
    }
  }, 60_000);
});
