// As Triton, nothing listens until the startup loads are done: a client that can connect finds
// every model it was promised loaded, and ready answers 200 from its first request.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createServer, type GalleyServer } from "../src/index.js";
import { gatedModel } from "./support/gated-model.js";
import { quietLog, tempRepository, waitFor } from "./support/harness.js";
import { killChildren, spawnCli } from "./support/process.js";

let server: GalleyServer | undefined;
afterEach(async () => {
  killChildren();
  await server?.close();
  server = undefined;
});

const listening = () => process.getActiveResourcesInfo().filter((r) => r === "TCPServerWrap").length;

describe("startup", () => {
  it("opens no port while the startup models load, then all of them with every model READY", async () => {
    const repo = tempRepository(["simple"]);
    const slow = gatedModel(repo);
    const before = listening();
    server = createServer({
      modelRepositories: [repo],
      log: quietLog(),
      exitTimeoutSecs: 5,
      http: { host: "127.0.0.1", port: 0 },
      grpc: { host: "127.0.0.1", port: 0 },
      metrics: { host: "127.0.0.1", port: 0 },
    });
    const started = server.listen();
    const core = server.core;
    await waitFor(async () => (await core.models.index()).some((m) => m.name === "slow" && m.state === "LOADING"), {
      what: "slow to be loading",
    });
    expect(listening()).toBe(before);
    slow.open();
    const { http, failedModels } = await started;
    expect(failedModels).toEqual([]);
    expect(listening()).toBe(before + 3);
    const ready = await fetch(`http://127.0.0.1:${http?.port}/v2/health/ready`);
    expect(ready.status).toBe(200);
    expect((await core.models.index(true)).map((m) => m.name)).toEqual(["simple", "slow"]);
  });

  it("with --exit-on-error (galley serve's default), a model that fails to load: exit 1 and no port opened", async () => {
    const repo = tempRepository(["simple"]);
    mkdirSync(join(repo, "broken", "1"), { recursive: true });
    writeFileSync(join(repo, "broken", "config.pbtxt"), 'name: "broken"\nbackend: "onnxruntime"\nmax_batch_size: -1\n');
    const args = ["serve", "--model-repository", repo, "--http-port=0", "--grpc-port=0", "--metrics-port=0"];
    const strict = spawnCli(args);
    expect(await strict.exited).toBe(1);
    expect(strict.output()).toMatch(/failed to load model\(s\): broken/);
    expect(strict.output()).not.toMatch(/Started (HTTPService|GRPCInferenceService|Metrics Service)/);

    const lenient = spawnCli([...args, "--exit-on-error=false"]);
    await lenient.waitFor(/Started HTTPService at/);
    expect(lenient.output()).toMatch(/failed to load model\(s\): broken/);
    lenient.child.kill("SIGTERM");
    expect(await lenient.exited).toBe(0);
  });
});
