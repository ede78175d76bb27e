// Graceful shutdown with requests in flight: every request the server accepted before close()
// (or SIGTERM) is answered, new ones are refused, the port stops accepting connections, and the
// CLI exits 0.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  EXAMPLES,
  fp32Bytes,
  type InferenceClient,
  range,
  readFp32,
  startServer,
  waitFor,
} from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";
import { killChildren, spawnCli, tryConnect } from "./support/process.js";

afterEach(async () => {
  killChildren();
  await cleanup();
});

const MLP = { model: "mlp_classifier", version: "1" };
/** mlp_classifier's max_batch_size: a request of 64 rows always runs alone, batcher or not. */
const ROWS = 64;
const CALLS = 200;

type Outcome = { ok: true; id: string; rows: number } | { ok: false; error: string };

/** Start `CALLS` ModelInfer calls of 64 rows each on mlp_classifier; each resolves to its outcome. */
function startCalls(client: InferenceClient): Promise<Outcome>[] {
  const input = fp32Bytes(range(ROWS * 64).map((i) => Math.cos(i / 7)));
  return range(CALLS).map((i) =>
    client
      .modelInfer({
        modelName: "mlp_classifier",
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
 * Wait, on the metrics endpoint, until the server has received all `CALLS` requests while some are
 * still queued. mlp_classifier has one instance and each request fills a whole batch, so while a
 * request is pending exactly one executes: received = pending + executions done + 1.
 */
async function waitUntilAllReceivedAndQueued(metricsUrl: string): Promise<number> {
  let pending = 0;
  await waitFor(
    async () => {
      const s = await scrape(metricsUrl);
      pending = sampleValue(s, "nv_inference_pending_request_count", MLP);
      const executed = sampleValue(s, "nv_inference_exec_count", MLP);
      if (pending === 0 && executed >= CALLS) throw new Error("every request finished before shutdown could begin");
      return pending >= 1 && pending + executed + 1 >= CALLS;
    },
    { intervalMs: 5, what: "every request to be received with some still queued" },
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
    const { client, server, grpcUrl, grpcPort, metricsUrl } = await startServer({
      modelRepositories: [EXAMPLES],
      controlMode: "explicit",
      loadModels: ["mlp_classifier"],
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

    expectAllAnswered(await Promise.all(calls));
    await closing;
    expect(server.core.isLive()).toBe(false);
    expect(await tryConnect(grpcPort)).toBe("ECONNREFUSED");
    expect(await tryConnect(Number(new URL(metricsUrl as string).port))).toBe("ECONNREFUSED");
  }, 60_000);
});

describe("galley serve and SIGTERM", () => {
  it("answers the requests in flight, then exits 0 and frees its ports", async () => {
    const cli = spawnCli([
      "serve",
      "--model-repository",
      EXAMPLES,
      "--http-port=0",
      "--grpc-port=0",
      "--metrics-port=0",
      "--http-address=127.0.0.1",
      "--grpc-address=127.0.0.1",
    ]);
    const [, grpcAddress] = await cli.waitFor(/Started GRPCInferenceService at (\S+)/);
    const [, metricsAddress] = await cli.waitFor(/Started Metrics Service at (\S+)/);
    const [, httpAddress] = await cli.waitFor(/Started HTTPService at (\S+)/);
    const client = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://${grpcAddress}` }));
    expect((await client.serverReady({})).ready).toBe(true);

    const calls = startCalls(client);
    expect(await waitUntilAllReceivedAndQueued(`http://${metricsAddress}`)).toBeGreaterThan(0);
    cli.child.kill("SIGTERM");

    expectAllAnswered(await Promise.all(calls));
    expect(await cli.exited).toBe(0);
    expect(cli.output()).toMatch(/Received SIGTERM/);
    expect(cli.output()).toMatch(/Server stopped/);
    for (const address of [grpcAddress, metricsAddress, httpAddress]) {
      expect(await tryConnect(Number(address?.split(":").pop()))).toBe("ECONNREFUSED");
    }
  }, 60_000);
});
