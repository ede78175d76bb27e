// Model control modes end to end on temporary repositories (PROTOCOL.md §5): none, explicit and
// poll; failed loads that leave the server up; version policies; poll reloads, including one under
// a steady inference load that must not fail a single request.
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  copyModel,
  EXAMPLES,
  expectGrpcError,
  type InferenceClient,
  range,
  readInt32,
  recordingLog,
  simpleRequest,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

const ALL = ["mlp_classifier", "simple", "simple_identity", "simple_int8", "simple_string"];
const A = range(16);
const B = range(16).map(() => 2);

async function index(client: InferenceClient) {
  return (await client.repositoryIndex({})).models.map((m) => ({
    name: m.name,
    version: m.version,
    state: m.state,
    reason: m.reason,
  }));
}

async function readyNames(client: InferenceClient): Promise<string[]> {
  return (await client.repositoryIndex({ ready: true })).models.map((m) => m.name);
}

async function inferSimple(client: InferenceClient, model = "simple", version = "") {
  const response = await client.modelInfer({ ...simpleRequest(A, B), modelName: model, modelVersion: version });
  expect(readInt32(response.rawOutputContents[0])).toEqual(A.map((v) => v + 2));
  return response;
}

/** A copy of simple named `name` (config name rewritten), with `extra` appended to its config. */
function simpleVariant(repo: string, name: string, extra = "", versions = [1]): string {
  const folder = join(repo, name);
  const source = join(EXAMPLES, "simple");
  for (const v of versions) {
    mkdirSync(join(folder, String(v)), { recursive: true });
    copyFileSync(join(source, "1", "model.onnx"), join(folder, String(v), "model.onnx"));
  }
  const config = readFileSync(join(source, "config.pbtxt"), "utf8").replace('name: "simple"', `name: "${name}"`);
  writeFileSync(join(folder, "config.pbtxt"), `${config}\n${extra}\n`);
  return folder;
}

describe("control mode none", () => {
  it("loads every model of the repository at startup", async () => {
    const repo = tempRepository(ALL);
    const { client, server, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);
    expect(await index(client)).toEqual(ALL.map((name) => ({ name, version: "1", state: "READY", reason: "" })));
    expect(server.core.isReady()).toBe(true);
    await inferSimple(client);
  });
});

describe("control mode explicit", () => {
  it("loads only the --load-model models; the others are listed by name only and unknown to inference", async () => {
    const repo = tempRepository(ALL);
    const { client, server } = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["simple", "simple_string"],
    });
    expect(await index(client)).toEqual([
      { name: "mlp_classifier", version: "", state: "", reason: "" },
      { name: "simple", version: "1", state: "READY", reason: "" },
      { name: "simple_identity", version: "", state: "", reason: "" },
      { name: "simple_int8", version: "", state: "", reason: "" },
      { name: "simple_string", version: "1", state: "READY", reason: "" },
    ]);
    await inferSimple(client);
    await expectGrpcError(
      client.modelReady({ name: "simple_int8" }),
      Code.NotFound,
      "Request for unknown model: 'simple_int8' is not found",
    );
    await expectGrpcError(
      client.modelInfer({ ...simpleRequest(A, B), modelName: "simple_int8" }),
      Code.NotFound,
      "Request for unknown model: 'simple_int8' is not found",
    );
    // Models never asked for do not make the server unready.
    expect(server.core.isReady()).toBe(true);
    expect((await client.serverReady({})).ready).toBe(true);
  });

  it("loads everything with --load-model=*", async () => {
    const repo = tempRepository(ALL);
    const { client, failedModels } = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["*"],
    });
    expect(failedModels).toEqual([]);
    expect(await readyNames(client)).toEqual(ALL);
  });
});

describe("a model that fails to load", () => {
  function brokenRepository(): string {
    const repo = tempRepository(["simple"]);
    // A config error (§4.3: max_batch_size must be >= 0) ...
    simpleVariant(repo, "bad_config");
    const badConfig = join(repo, "bad_config", "config.pbtxt");
    writeFileSync(badConfig, readFileSync(badConfig, "utf8").replace("max_batch_size: 8", "max_batch_size: -1"));
    // ... and a model file the backend cannot open.
    simpleVariant(repo, "bad_file");
    writeFileSync(join(repo, "bad_file", "1", "model.onnx"), "this is not an ONNX model");
    return repo;
  }

  it("leaves the server up, is UNAVAILABLE with its reason, and makes a strict-readiness server unready", async () => {
    const repo = brokenRepository();
    const { client, server, failedModels, grpcUrl } = await startServer({ modelRepositories: [repo] });
    expect([...failedModels].sort()).toEqual(["bad_config", "bad_file"]);
    expect((await client.serverLive({})).live).toBe(true);

    const rows = await index(client);
    const badConfig = rows.find((r) => r.name === "bad_config");
    expect(badConfig?.state).toBe("UNAVAILABLE");
    expect(badConfig?.reason).toContain("max_batch_size");
    const badFile = rows.find((r) => r.name === "bad_file");
    expect(badFile?.state).toBe("UNAVAILABLE");
    expect(badFile?.reason).not.toBe("");
    expect(rows.find((r) => r.name === "simple")).toEqual({ name: "simple", version: "1", state: "READY", reason: "" });

    await inferSimple(client);
    expect((await client.modelReady({ name: "bad_file" })).ready).toBe(false);
    await expectGrpcError(
      client.modelInfer({ ...simpleRequest(A, B), modelName: "bad_file" }),
      Code.NotFound,
      "Request for unknown model: 'bad_file' has no available versions",
    );

    // --strict-readiness=true (the default): not ready while a model is not READY.
    expect(server.core.isReady()).toBe(false);
    expect((await client.serverReady({})).ready).toBe(false);
    const health = createClient(Health, createGrpcTransport({ baseUrl: grpcUrl }));
    expect((await health.check({})).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
  });

  it("keeps a --strict-readiness=false server ready", async () => {
    const repo = brokenRepository();
    const { client, server, failedModels } = await startServer({ modelRepositories: [repo], strictReadiness: false });
    expect(failedModels.length).toBe(2);
    expect(server.core.isReady()).toBe(true);
    expect((await client.serverReady({})).ready).toBe(true);
    await inferSimple(client);
  });
});

describe("version policies", () => {
  it("serves latest{N}, all, specific and the default latest{1} from version folders 1, 2, 3", async () => {
    const repo = tempRepository();
    const versions = [1, 2, 3];
    simpleVariant(repo, "latest_two", "version_policy: { latest: { num_versions: 2 } }", versions);
    simpleVariant(repo, "every_version", "version_policy: { all: {} }", versions);
    simpleVariant(repo, "one_and_three", "version_policy: { specific: { versions: [ 1, 3 ] } }", versions);
    simpleVariant(repo, "default_policy", "", versions);
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);

    const ready = (await client.repositoryIndex({ ready: true })).models.map((m) => `${m.name}:${m.version}`);
    expect(ready).toEqual([
      "default_policy:3",
      "every_version:1",
      "every_version:2",
      "every_version:3",
      "latest_two:2",
      "latest_two:3",
      "one_and_three:1",
      "one_and_three:3",
    ]);

    const metadataVersions = async (name: string) => [...(await client.modelMetadata({ name })).versions].sort();
    expect(await metadataVersions("latest_two")).toEqual(["2", "3"]);
    expect(await metadataVersions("every_version")).toEqual(["1", "2", "3"]);
    expect(await metadataVersions("one_and_three")).toEqual(["1", "3"]);
    expect(await metadataVersions("default_policy")).toEqual(["3"]);

    // No version: the highest READY one. A version: that one.
    expect((await inferSimple(client, "latest_two")).modelVersion).toBe("3");
    expect((await inferSimple(client, "latest_two", "2")).modelVersion).toBe("2");
    expect((await inferSimple(client, "every_version", "1")).modelVersion).toBe("1");
    expect((await inferSimple(client, "one_and_three", "1")).modelVersion).toBe("1");
    expect((await client.modelReady({ name: "one_and_three", version: "3" })).ready).toBe(true);
    expect((await client.modelReady({ name: "every_version", version: "2" })).ready).toBe(true);

    // Versions outside the policy are not served.
    const notServed = async (name: string, version: string) => {
      const error = await client.modelInfer({ ...simpleRequest(A, B), modelName: name, modelVersion: version }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConnectError);
      expect([Code.NotFound, Code.Unavailable]).toContain((error as ConnectError).code);
      expect((error as ConnectError).rawMessage).toMatch(
        new RegExp(`^Request for unknown model: '${name}' version ${version} is not (found|at ready state)$`),
      );
    };
    await notServed("latest_two", "1");
    await notServed("one_and_three", "2");
    await notServed("default_policy", "2");
    await notServed("every_version", "4");
  });
});

// Poll mode waits on rescans (every second here): allow for a slow machine.
describe("control mode poll", { timeout: 30_000 }, () => {
  async function pollServer(models: string[]) {
    const repo = tempRepository(models);
    const { log, lines } = recordingLog();
    const running = await startServer({ modelRepositories: [repo], controlMode: "poll", pollSecs: 1, log });
    return { ...running, repo, lines };
  }

  it("refuses explicit load and unload", async () => {
    const { client } = await pollServer(["simple"]);
    const message = "explicit model load / unload is not allowed if polling is enabled";
    await expectGrpcError(client.repositoryModelLoad({ modelName: "simple" }), Code.Unavailable, message);
    await expectGrpcError(client.repositoryModelUnload({ modelName: "simple" }), Code.Unavailable, message);
  });

  it("picks up an added model", async () => {
    const { client, repo } = await pollServer(["simple"]);
    expect(await readyNames(client)).toEqual(["simple"]);
    copyModel("simple_int8", repo);
    await waitFor(async () => (await readyNames(client)).includes("simple_int8"), { what: "simple_int8 to load" });
    expect((await client.modelReady({ name: "simple_int8" })).ready).toBe(true);
  });

  it("unloads a removed model", async () => {
    const { client, repo } = await pollServer(["simple", "simple_int8"]);
    expect(await readyNames(client)).toEqual(["simple", "simple_int8"]);
    rmSync(join(repo, "simple_int8"), { recursive: true, force: true });
    await waitFor(async () => !(await readyNames(client)).includes("simple_int8"), { what: "simple_int8 to unload" });
    const error = await client.modelInfer({ ...simpleRequest(A, B), modelName: "simple_int8" }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.NotFound);
    expect(await readyNames(client)).toEqual(["simple"]);
    await inferSimple(client);
  });

  it("reloads a model whose config.pbtxt changed", async () => {
    const { client, repo } = await pollServer(["simple"]);
    const config = join(repo, "simple", "config.pbtxt");
    writeFileSync(config, readFileSync(config, "utf8").replace("max_batch_size: 8", "max_batch_size: 4"));
    await waitFor(async () => (await client.modelConfig({ name: "simple" })).config?.maxBatchSize === 4, {
      what: "max_batch_size 4",
    });
    await expectGrpcError(
      client.modelInfer(simpleRequest(range(80), range(80))),
      Code.InvalidArgument,
      "[request id: <id_unknown>] inference request batch-size must be <= 4 for 'simple'",
    );
    await inferSimple(client);
  });

  it("keeps serving the old model when a changed config fails to load", async () => {
    const { client, repo, lines } = await pollServer(["simple"]);
    const config = join(repo, "simple", "config.pbtxt");
    writeFileSync(config, readFileSync(config, "utf8").replace("max_batch_size: 8", "max_batch_size: -1"));
    await waitFor(() => lines.some((l) => l.includes("simple") && l.startsWith("E")), { what: "the failed poll" });
    expect((await client.modelConfig({ name: "simple" })).config?.maxBatchSize).toBe(8);
    expect((await client.modelReady({ name: "simple" })).ready).toBe(true);
    await inferSimple(client);
  });

  it("reloads under a steady inference load with zero failed requests", async () => {
    const { client, repo, lines } = await pollServer(["simple"]);
    const loaded = () => lines.filter((l) => l.includes("successfully loaded 'simple'")).length;
    expect(loaded()).toBe(1);

    let stop = false;
    let completed = 0;
    const failures: string[] = [];
    const loop = async (k: number) => {
      for (let i = 0; !stop; i++) {
        const a = range(16, k * 100_000 + i * 16);
        const b = range(16).map((j) => j * k);
        try {
          const response = await client.modelInfer(simpleRequest(a, b, { id: `${k}-${i}` }));
          const sum = readInt32(response.rawOutputContents[0]);
          if (response.id !== `${k}-${i}` || sum.some((v, j) => v !== (a[j] ?? 0) + (b[j] ?? 0))) {
            failures.push(`wrong answer for ${k}-${i}`);
          }
        } catch (error) {
          failures.push(error instanceof ConnectError ? `${Code[error.code]}: ${error.rawMessage}` : String(error));
        }
        completed++;
      }
    };
    const loops = range(4).map(loop);
    try {
      await waitFor(() => completed >= 40, { what: "the load to run" });

      const config = join(repo, "simple", "config.pbtxt");
      writeFileSync(
        config,
        `${readFileSync(config, "utf8")}
parameters { key: "reload_marker" value: { string_value: "2" } }
instance_group [ { count: 3 kind: KIND_CPU } ]
`,
      );
      await waitFor(
        async () =>
          (await client.modelConfig({ name: "simple" })).config?.parameters.reload_marker?.stringValue === "2",
        { what: "the reloaded config" },
      );
      // Keep the load on the new model for a while after the swap.
      const atSwap = completed;
      await waitFor(() => completed >= atSwap + 40, { what: "requests after the reload" });
    } finally {
      stop = true;
      await Promise.all(loops);
    }

    expect(failures).toEqual([]);
    expect(completed).toBeGreaterThanOrEqual(80);
    expect(loaded()).toBe(2);
    const live = (await client.modelConfig({ name: "simple" })).config;
    expect(live?.instanceGroup.map((g) => g.count)).toEqual([3]);
    expect((await client.modelStatistics({ name: "simple" })).modelStats[0]?.inferenceStats?.fail?.count ?? 0n).toBe(
      0n,
    );
  });
});
