// SIGTERM in every state a server can be in: an open sequence, a batcher holding a request for its
// queue delay, a decoupled stream half sent, models still loading, a model whose instance keeps
// dying. Each time, what was accepted is answered and `galley serve` exits 0 within its exit
// timeout, instead of logging "Server stopped" and living on.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService, type ModelInferRequest } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  copyModel,
  type InferenceClient,
  int32Bytes,
  pushable,
  range,
  readInt32,
  tempRepository,
} from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";
import { type CliProcess, killChildren, serveArgs as loopbackServe, spawnCli } from "./support/process.js";

afterEach(async () => {
  killChildren();
  await cleanup();
});

const EXIT_TIMEOUT_SECS = 20;

interface Served {
  cli: CliProcess;
  client: InferenceClient;
  httpUrl: string;
  metricsUrl: string;
}

/** `galley serve` on free loopback ports; a later `--exit-timeout-secs` in `extra` wins. */
const serveArgs = (repo: string, extra: readonly string[] = []) =>
  loopbackServe(repo, [`--exit-timeout-secs=${EXIT_TIMEOUT_SECS}`, ...extra]);

async function serve(repo: string, extra: readonly string[] = []): Promise<Served> {
  const cli = spawnCli(serveArgs(repo, extra));
  const [, grpc] = await cli.waitFor(/Started GRPCInferenceService at (\S+)/);
  const [, http] = await cli.waitFor(/Started HTTPService at (\S+)/);
  const [, metrics] = await cli.waitFor(/Started Metrics Service at (\S+)/);
  const client = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://${grpc}` }));
  return { cli, client, httpUrl: `http://${http}`, metricsUrl: `http://${metrics}` };
}

/** SIGTERM, then the exit code and how long the process took to end. */
async function terminate(cli: CliProcess): Promise<{ code: number | null; seconds: number }> {
  const start = process.hrtime.bigint();
  cli.child.kill("SIGTERM");
  const code = await cli.exited;
  return { code, seconds: Number(process.hrtime.bigint() - start) / 1e9 };
}

/** A scripted model in `repo`: `body` is the class body, the config is an INT32 [16] identity. */
function scriptedModel(repo: string, name: string, body: string, config = ""): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"
backend: "js"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
${config}
`,
  );
  writeFileSync(
    join(repo, name, "1", "model.mjs"),
    `export default class {
  ${body}
  execute(requests) {
    return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: r.input("IN").shape, data: r.input("IN").typed() }] }));
  }
}
`,
  );
}

const identityRequest = (model: string, values: number[]) => ({
  modelName: model,
  inputs: [{ name: "IN", datatype: "INT32", shape: [1n, 16n] }] as ModelInferRequest["inputs"],
  rawInputContents: [int32Bytes(values)],
});

describe("galley serve exits 0 after SIGTERM", () => {
  it("with a sequence started and never ended", async () => {
    const repo = tempRepository(["simple_sequence"]);
    const { cli, httpUrl } = await serve(repo);
    const r = await fetch(`${httpUrl}/v2/models/simple_sequence/infer`, {
      method: "POST",
      body: JSON.stringify({
        parameters: { sequence_id: 7, sequence_start: true },
        inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [5] }],
      }),
    });
    expect(((await r.json()) as { outputs: { data: number[] }[] }).outputs[0]?.data).toEqual([6]);
    const { code, seconds } = await terminate(cli);
    expect(code).toBe(0);
    expect(seconds).toBeLessThan(EXIT_TIMEOUT_SECS);
    expect(cli.output()).toMatch(/Server stopped/);
  });

  it("after dynamic-batched traffic, and with a request waiting for its batcher's queue delay", async () => {
    const repo = tempRepository(["mlp_classifier"]);
    scriptedModel(
      repo,
      "held",
      "",
      "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 3000000 }",
    );
    const { cli, client, metricsUrl } = await serve(repo);
    const input = new Uint8Array(Float32Array.from(range(64), (i) => Math.sin(i)).buffer);
    let next = 0;
    const worker = async () => {
      while (next < 256) {
        next++;
        await client.modelInfer({
          modelName: "mlp_classifier",
          inputs: [{ name: "INPUT", datatype: "FP32", shape: [1n, 64n] }] as ModelInferRequest["inputs"],
          rawInputContents: [input],
        });
      }
    };
    await Promise.all(range(32).map(worker));

    const held = client.modelInfer(identityRequest("held", range(16)));
    // The request is in the batcher's queue: the metrics say so.
    for (;;) {
      const pending = sampleValue(await scrape(metricsUrl), "nv_inference_pending_request_count", {
        model: "held",
        version: "1",
      });
      if (pending === 1) break;
    }
    const exited = terminate(cli);
    expect(readInt32((await held).rawOutputContents[0])).toEqual(range(16));
    const { code, seconds } = await exited;
    expect(code).toBe(0);
    expect(seconds).toBeLessThan(EXIT_TIMEOUT_SECS);
  });

  it("with an ONNX model's worker waiting hot for the next call (worker_hot_wait_us at its largest)", async () => {
    const repo = tempRepository([]);
    const dir = copyModel("simple", repo, "simple_worker");
    const { readFileSync } = await import("node:fs");
    const config = readFileSync(join(dir, "config.pbtxt"), "utf8").replace('name: "simple"', 'name: "simple_worker"');
    writeFileSync(
      join(dir, "config.pbtxt"),
      `${config}
parameters { key: "inline_max_run_us" value: { string_value: "0" } }
parameters { key: "worker_hot_wait_us" value: { string_value: "1000000" } }
`,
    );
    const { cli, client } = await serve(repo);
    const request = {
      modelName: "simple_worker",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
      ] as ModelInferRequest["inputs"],
      rawInputContents: [int32Bytes(range(16)), int32Bytes(range(16).map(() => 1))],
    };
    // Calls one after another: after each, the worker polls for the next for up to a second.
    for (let i = 0; i < 20; i++) {
      const response = await client.modelInfer(request);
      expect(readInt32(response.rawOutputContents[0])).toEqual(range(16).map((v) => v + 1));
    }
    // The stop reaches a worker that is polling, not sleeping: the exit does not wait out its second.
    const { code, seconds } = await terminate(cli);
    expect(code).toBe(0);
    expect(seconds).toBeLessThan(EXIT_TIMEOUT_SECS);
    expect(cli.output()).toMatch(/Server stopped/);
  });

  it("with a decoupled stream half sent: the stream finishes first", async () => {
    const repo = tempRepository(["repeat_int32"]);
    const { cli, client } = await serve(repo);
    const requests =
      pushable<Parameters<InferenceClient["modelStreamInfer"]>[0] extends AsyncIterable<infer T> ? T : never>();
    const values = range(8, 10);
    requests.push({
      modelName: "repeat_int32",
      inputs: [
        { name: "IN", datatype: "INT32", shape: [8n] },
        { name: "DELAY", datatype: "UINT32", shape: [8n] },
        { name: "WAIT", datatype: "UINT32", shape: [1n] },
      ] as ModelInferRequest["inputs"],
      rawInputContents: [int32Bytes(values), int32Bytes(values.map(() => 100)), int32Bytes([0])],
    } as never);
    requests.end();
    const received: number[] = [];
    let exited: ReturnType<typeof terminate> | undefined;
    for await (const response of client.modelStreamInfer(requests)) {
      expect(response.errorMessage).toBe("");
      received.push(readInt32(response.inferResponse?.rawOutputContents[0])[0] ?? -1);
      exited ??= terminate(cli);
    }
    expect(received).toEqual(values);
    const { code, seconds } = await (exited as ReturnType<typeof terminate>);
    expect(code).toBe(0);
    expect(seconds).toBeLessThan(EXIT_TIMEOUT_SECS);
  });

  it("while models are loading, without claiming to have started", async () => {
    const repo = tempRepository(["simple"]);
    scriptedModel(
      repo,
      "slow_load",
      `async initialize() {
    console.log("slow_load: initializing");
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }`,
    );
    const cli = spawnCli(serveArgs(repo));
    await cli.waitFor(/slow_load: initializing/);
    const { code, seconds } = await terminate(cli);
    expect(code).toBe(0);
    expect(seconds).toBeLessThan(EXIT_TIMEOUT_SECS);
    const after = cli.output().slice(cli.output().indexOf("Received SIGTERM"));
    expect(after).toMatch(/Server stopped/);
    expect(after).not.toMatch(/Started HTTPService|failed to load model|Ready:/);
  });

  it("with a model whose instance keeps dying", async () => {
    const repo = tempRepository(["simple"]);
    scriptedModel(repo, "crashing", "initialize() { setTimeout(() => process.exit(3), 10); }");
    const { cli, client } = await serve(repo);
    expect((await client.modelReady({ name: "simple" })).ready).toBe(true);
    await cli.waitFor(/crashing[\s\S]*(exited|died|restart)/i);
    const { code, seconds } = await terminate(cli);
    expect(code).toBe(0);
    expect(seconds).toBeLessThan(EXIT_TIMEOUT_SECS);
  });
});

describe("galley serve gives up at the exit timeout", () => {
  it("exits 1 when a request is still running when the timeout ends", async () => {
    const repo = tempRepository([]);
    copyModel("simple", repo);
    scriptedModel(repo, "stuck", "", 'parameters { key: "execute_timeout_ms" value: { string_value: "600000" } }');
    // The model's execute never returns; patch it in after the generic writer.
    writeFileSync(
      join(repo, "stuck", "1", "model.mjs"),
      `export default class { execute() { console.log("stuck: executing"); for (;;) {} } }
`,
    );
    const cli = spawnCli(serveArgs(repo, ["--exit-timeout-secs=1"]));
    const [, grpc] = await cli.waitFor(/Started GRPCInferenceService at (\S+)/);
    const client = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://${grpc}` }));
    const stuck = client.modelInfer(identityRequest("stuck", range(16))).catch((error: unknown) => error);
    await cli.waitFor(/stuck: executing/);
    const { code, seconds } = await terminate(cli);
    expect(code).toBe(1);
    expect(seconds).toBeLessThan(10);
    expect(cli.output()).toMatch(/exit timeout of 1 s expired/);
    await stuck;
  });
});
