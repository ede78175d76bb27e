// --model-config-name (Triton's flag): each model reads <model>/configs/<name>.pbtxt where that file
// exists and falls back to its config.pbtxt where it does not; `configs` is never a version
// folder. In process (ServerOptions.modelConfigName) and through `galley serve` as a real process.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  copyModel,
  EXAMPLES,
  type InferenceClient,
  range,
  readInt32,
  simpleRequest,
  startServer,
  tempRepository,
} from "./support/harness.js";

const cli = fileURLToPath(new URL("../dist/cli/galley.js", import.meta.url));
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
  await cleanup();
});

const SIMPLE = readFileSync(join(EXAMPLES, "simple", "config.pbtxt"), "utf8");

/** simple's config as `name`, with max_batch_size `batch` and `instances` CPU instances. */
function config(name: string, batch: number, instances: number): string {
  return `${SIMPLE.replace('name: "simple"', `name: "${name}"`).replace("max_batch_size: 8", `max_batch_size: ${batch}`)}
instance_group [ { count: ${instances}, kind: KIND_CPU } ]
`;
}

/**
 * picked: configs/gpu.pbtxt (batch 4, 2 instances) and configs/other.pbtxt (batch 2);
 * plain: no configs/ folder; elsewhere: configs/other.pbtxt only. Every config.pbtxt: batch 8, 1 instance.
 */
function repository(): string {
  const repo = tempRepository();
  for (const name of ["picked", "plain", "elsewhere"]) {
    const folder = copyModel("simple", repo, name);
    writeFileSync(join(folder, "config.pbtxt"), config(name, 8, 1));
    if (name !== "plain") mkdirSync(join(folder, "configs"));
  }
  writeFileSync(join(repo, "picked", "configs", "gpu.pbtxt"), config("picked", 4, 2));
  writeFileSync(join(repo, "picked", "configs", "other.pbtxt"), config("picked", 2, 1));
  writeFileSync(join(repo, "elsewhere", "configs", "other.pbtxt"), config("elsewhere", 2, 1));
  return repo;
}

async function shape(client: InferenceClient, name: string): Promise<[number, number | undefined]> {
  const { config } = await client.modelConfig({ name });
  return [config?.maxBatchSize ?? -1, config?.instanceGroup[0]?.count];
}

describe("--model-config-name", () => {
  it("reads configs/<name>.pbtxt where it exists and config.pbtxt elsewhere", async () => {
    const { client, failedModels } = await startServer({
      modelRepositories: [repository()],
      modelConfigName: "gpu",
    });
    expect(failedModels).toEqual([]);
    expect(await shape(client, "picked")).toEqual([4, 2]);
    expect(await shape(client, "plain")).toEqual([8, 1]);
    expect(await shape(client, "elsewhere")).toEqual([8, 1]);
    const response = await client.modelInfer({ ...simpleRequest(range(16), range(16)), modelName: "picked" });
    expect(readInt32(response.rawOutputContents[0])).toEqual(range(16).map((v) => 2 * v));
    // configs/ is not a version folder
    const index = await client.repositoryIndex({});
    expect(index.models.filter((m) => m.name === "picked").map((m) => [m.version, m.state])).toEqual([["1", "READY"]]);
  });

  it("another name picks another file; no name reads config.pbtxt everywhere", async () => {
    const other = await startServer({ modelRepositories: [repository()], modelConfigName: "other" });
    expect(await shape(other.client, "picked")).toEqual([2, 1]);
    expect(await shape(other.client, "plain")).toEqual([8, 1]);
    expect(await shape(other.client, "elsewhere")).toEqual([2, 1]);
    const none = await startServer({ modelRepositories: [repository()] });
    expect(await shape(none.client, "picked")).toEqual([8, 1]);
    expect(await shape(none.client, "elsewhere")).toEqual([8, 1]);
  });

  it("a selected file that is not a valid config fails the load (no fallback to config.pbtxt)", async () => {
    const repo = repository();
    writeFileSync(join(repo, "picked", "configs", "gpu.pbtxt"), 'name: "picked"\nmax_batch_size: "many"\n');
    const { client, failedModels } = await startServer({ modelRepositories: [repo], modelConfigName: "gpu" });
    expect(failedModels).toEqual(["picked"]);
    expect(await shape(client, "plain")).toEqual([8, 1]);
    // The message names the file that was read.
    const index = await client.repositoryIndex({});
    const reason = index.models.find((m) => m.name === "picked")?.reason ?? "";
    expect(reason).toContain(join("picked", "configs", "gpu.pbtxt"));
    expect(reason).not.toContain("config.pbtxt:");
  });

  it("a name is a file in configs/, never a path out of it", async () => {
    const repo = repository();
    writeFileSync(join(repo, "picked", "evil.pbtxt"), config("picked", 2, 1));
    const { client, failedModels } = await startServer({ modelRepositories: [repo], modelConfigName: "../evil" });
    expect(failedModels).toEqual([]);
    expect(await shape(client, "picked")).toEqual([8, 1]);
  });

  it("galley serve --model-config-name gpu", async () => {
    const child = spawn(
      process.execPath,
      [
        cli,
        "serve",
        "--model-repository",
        repository(),
        "--model-config-name",
        "gpu",
        "--http-address=127.0.0.1",
        "--http-port=0",
        "--allow-grpc=false",
        "--allow-metrics=false",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    children.push(child);
    let output = "";
    const address = await new Promise<string>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk;
        const match = output.match(/Started HTTPService at (\S+)/);
        if (match?.[1]) resolve(match[1]);
      };
      child.stdout?.on("data", onData);
      child.stderr?.on("data", onData);
      child.once("exit", () => reject(new Error(`galley serve exited; output:\n${output}`)));
    });
    const read = async (name: string) =>
      (await (await fetch(`http://${address}/v2/models/${name}/config`)).json()) as {
        max_batch_size: number;
        instance_group: { count: number }[];
      };
    const picked = await read("picked");
    expect([picked.max_batch_size, picked.instance_group[0]?.count]).toEqual([4, 2]);
    expect((await read("plain")).max_batch_size).toBe(8);
    child.kill("SIGTERM");
  });
});
