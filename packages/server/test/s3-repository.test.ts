// `--model-repository s3://…` against a real S3-compatible server (moto, support/s3-server.ts):
// the example models served from a bucket by a `galley serve` process; explicit loads download a
// private copy that unload deletes; polling sees models added, changed and removed; wrong
// credentials and a missing bucket answer in Triton's words; hostile object keys and too many
// objects fail the load without writing outside the copy.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CLI, cleanup, EXAMPLES, range, readInt32, simpleRequest, startServer } from "./support/harness.js";
import {
  createBucket,
  deletePrefix,
  putObject,
  type S3Server,
  startS3Server,
  uploadFolder,
} from "./support/s3-server.js";

let s3: S3Server;
let mount: string;
const saved = { ...process.env };
const children: ChildProcess[] = [];

beforeAll(async () => {
  s3 = await startS3Server();
  mount = mkdtempSync(join(tmpdir(), "galley-s3-mount-"));
  Object.assign(process.env, s3.env, { TRITON_AWS_MOUNT_DIRECTORY: mount });
  await createBucket(s3, "models");
  await uploadFolder(s3, "models", EXAMPLES, "examples/");
}, 120_000);

afterEach(async () => {
  // A failed test's server may be killed before it deletes its copies: each test starts with none.
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
  await cleanup();
  for (const copy of copies()) rmSync(join(mount, copy), { recursive: true, force: true });
  process.env = { ...saved, ...s3.env, TRITON_AWS_MOUNT_DIRECTORY: mount };
});

afterAll(async () => {
  await s3?.stop();
  process.env = saved;
  rmSync(mount, { recursive: true, force: true });
});

/** The copies downloaded now: the folders under the mount directory. */
const copies = () => readdirSync(mount);

/** `galley serve` with `args`; resolves with its HTTP address, or rejects with its output when it exits. */
function serve(args: string[], env: Record<string, string> = {}): { child: ChildProcess; ready: Promise<string> } {
  const child = spawn(
    process.execPath,
    [CLI, "serve", ...args, "--http-address=127.0.0.1", "--http-port=0", "--allow-grpc=false", "--allow-metrics=false"],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } },
  );
  children.push(child);
  let output = "";
  const ready = new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk;
      const match = output.match(/Started HTTPService at (\S+)/);
      if (match?.[1]) resolve(match[1]);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => reject(new Error(`exit ${code}: ${output}`)));
  });
  return { child, ready };
}

/** Wait for `check` to hold, looking every 100 ms for at most 30 s (a poll is 1 s here). */
async function until(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in 30 s");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const url = () => `s3://${s3.endpoint}/models/examples`;

describe("an s3:// model repository", () => {
  it("serves the example models from a bucket through galley serve, and deletes the copies at exit", async () => {
    const { child, ready } = serve(["--model-repository", url()]);
    const address = await ready;
    const index = (await (await fetch(`http://${address}/v2/repository/index`, { method: "POST" })).json()) as {
      name: string;
      state?: string;
    }[];
    expect(index.filter((m) => m.state !== "READY")).toEqual([]);
    expect(index.map((m) => m.name)).toEqual(
      readdirSync(EXAMPLES)
        .filter((n) => statSync(join(EXAMPLES, n)).isDirectory())
        .sort(),
    );
    const infer = async (model: string, body: unknown) =>
      (await (
        await fetch(`http://${address}/v2/models/${model}/infer`, { method: "POST", body: JSON.stringify(body) })
      ).json()) as { outputs: { name: string; data: number[] }[] };
    const simple = await infer("simple", {
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: range(16) },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: range(16).map(() => 1) },
      ],
    });
    expect(simple.outputs.find((o) => o.name === "OUTPUT0")?.data).toEqual(range(16).map((v) => v + 1));
    const addSub = await infer("add_sub", {
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4], data: [1, 2, 3, 4] },
        { name: "INPUT1", datatype: "FP32", shape: [4], data: [1, 1, 1, 1] },
      ],
    });
    expect(addSub.outputs.find((o) => o.name === "OUTPUT0")?.data).toEqual([2, 3, 4, 5]);
    expect(copies().length).toBe(index.length);
    for (const copy of copies()) expect(statSync(join(mount, copy)).mode & 0o777).toBe(0o700);
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(copies()).toEqual([]);
  }, 180_000);

  it("explicit load downloads a copy, a config override reads it, unload deletes it, a load after a change downloads afresh", async () => {
    const { client } = await startServer({ modelRepositories: [url()], controlMode: "explicit" });
    expect(copies()).toEqual([]);
    await client.repositoryModelLoad({ modelName: "simple" });
    expect(copies().length).toBe(1);
    const [copy] = copies();
    expect(readdirSync(join(mount, copy as string, "simple", "1"))).toEqual(["model.onnx"]);
    const response = await client.modelInfer(simpleRequest(range(16), range(16)));
    expect(readInt32(response.rawOutputContents[0])).toEqual(range(16).map((v) => 2 * v));
    // A config override applies to the downloaded files as to a folder's; the reload's new copy
    // replaces the old one once it serves.
    await client.repositoryModelLoad({
      modelName: "simple",
      parameters: { config: { parameterChoice: { case: "stringParam", value: '{"max_batch_size":"16"}' } } },
    });
    expect((await client.modelConfig({ name: "simple" })).config?.maxBatchSize).toBe(16);
    expect(copies().length).toBe(1);
    expect(copies()).not.toEqual([copy]);
    await client.repositoryModelUnload({ modelName: "simple" });
    expect(copies()).toEqual([]);

    const config = readFileSync(join(EXAMPLES, "simple", "config.pbtxt"), "utf8").replace(
      "max_batch_size: 8",
      "max_batch_size: 2",
    );
    await putObject(s3, "models", "changed/simple/config.pbtxt", config);
    await putObject(
      s3,
      "models",
      "changed/simple/1/model.onnx",
      readFileSync(join(EXAMPLES, "simple", "1", "model.onnx")),
    );
    const changed = await startServer({
      modelRepositories: [`s3://${s3.endpoint}/models/changed`],
      controlMode: "explicit",
    });
    await changed.client.repositoryModelLoad({ modelName: "simple" });
    expect((await changed.client.modelConfig({ name: "simple" })).config?.maxBatchSize).toBe(2);
    await putObject(
      s3,
      "models",
      "changed/simple/config.pbtxt",
      config.replace("max_batch_size: 2", "max_batch_size: 4"),
    );
    await changed.client.repositoryModelLoad({ modelName: "simple" });
    expect((await changed.client.modelConfig({ name: "simple" })).config?.maxBatchSize).toBe(4);
    expect(copies().length).toBe(1);
  }, 120_000);

  it("polling loads a model added to the bucket, reloads it when changed and unloads it when removed", async () => {
    const prefix = "polled/";
    await putObject(s3, "models", `${prefix}.keep`, "");
    const { client } = await startServer({
      modelRepositories: [`s3://${s3.endpoint}/models/polled`],
      controlMode: "poll",
      pollSecs: 1,
    });
    const state = async () => (await client.repositoryIndex({})).models.find((m) => m.name === "square_int32")?.state;
    expect(await state()).toBeUndefined();
    await uploadFolder(s3, "models", join(EXAMPLES, "square_int32"), `${prefix}square_int32/`);
    await until(async () => (await state()) === "READY");
    expect(copies().length).toBe(1);
    const before = copies();
    const config = readFileSync(join(EXAMPLES, "square_int32", "config.pbtxt"), "utf8");
    await putObject(
      s3,
      "models",
      `${prefix}square_int32/config.pbtxt`,
      `${config}\nparameters: { key: "changed" value: { string_value: "yes" } }\n`,
    );
    await until(
      async () => (await client.modelConfig({ name: "square_int32" })).config?.parameters.changed !== undefined,
    );
    await until(async () => copies().length === 1 && copies()[0] !== before[0]);
    await deletePrefix(s3, "models", `${prefix}square_int32/`);
    // The version is UNAVAILABLE as soon as it has unloaded; its copy is deleted right after.
    await until(async () => (await state()) === "UNAVAILABLE" && copies().length === 0);
  }, 120_000);

  it("wrong credentials and a missing bucket stop galley serve with Triton's message", async () => {
    const signed = await startS3Server(true);
    try {
      await createBucket(signed, "signed");
      const where = `s3://${signed.endpoint}/signed/models`;
      const wrong = serve(["--model-repository", where], { ...signed.env, AWS_SECRET_ACCESS_KEY: "wrong" });
      await expect(wrong.ready).rejects.toThrow(
        /exit 1: .*Unable to create S3 filesystem client\. Check account credentials\. Exception: 'AccessDenied' Message: 'Access Denied'/s,
      );
      const unknown = serve(["--model-repository", where], { ...signed.env, AWS_ACCESS_KEY_ID: "AKIANOBODY" });
      await expect(unknown.ready).rejects.toThrow(
        /exit 1: .*Unable to create S3 filesystem client\. .*Exception: '\w+'/s,
      );
    } finally {
      await signed.stop();
    }
    const missing = serve(["--model-repository", `s3://${s3.endpoint}/no-such-bucket/models`]);
    await expect(missing.ready).rejects.toThrow(
      /exit 1: .*Unable to create S3 filesystem client\. Check account credentials\. Exception: 'NoSuchBucket' Message: 'The specified bucket does not exist'/s,
    );
  }, 60_000);

  it("refuses hostile object keys and too many objects, writing nothing outside the copy", async () => {
    const onnx = readFileSync(join(EXAMPLES, "simple", "1", "model.onnx"));
    const config = readFileSync(join(EXAMPLES, "simple", "config.pbtxt"), "utf8");
    const hostile: Record<string, string> = {
      dots: "1/../../../escaped.txt",
      backslash: "1\\..\\..\\escaped.txt",
      absolute: "/tmp/escaped.txt",
      marker: "../",
    };
    for (const [name, key] of Object.entries(hostile)) {
      await putObject(
        s3,
        "models",
        `hostile/${name}/config.pbtxt`,
        config.replace('name: "simple"', `name: "${name}"`),
      );
      await putObject(s3, "models", `hostile/${name}/1/model.onnx`, onnx);
      await putObject(s3, "models", `hostile/${name}/${key}`, "escaped");
    }
    const { client } = await startServer({
      modelRepositories: [`s3://${s3.endpoint}/models/hostile`],
      controlMode: "explicit",
    });
    for (const name of Object.keys(hostile)) {
      await expect(client.repositoryModelLoad({ modelName: name })).rejects.toThrow(
        new RegExp(`failed to load '${name}', refusing object 'hostile/${name}/.*' of s3://`),
      );
    }
    expect(copies()).toEqual([]);
    expect(readdirSync(tmpdir()).filter((f) => f === "escaped.txt")).toEqual([]);

    process.env.GALLEY_S3_MAX_FILES = "1";
    const few = await startServer({ modelRepositories: [url()], controlMode: "explicit" });
    await expect(few.client.repositoryModelLoad({ modelName: "simple" })).rejects.toThrow(
      /failed to load 'simple', it has more than GALLEY_S3_MAX_FILES=1 objects in s3:/,
    );
    process.env.GALLEY_S3_MAX_FILES = "";
    process.env.GALLEY_S3_MAX_MODEL_BYTES = "100";
    const small = await startServer({ modelRepositories: [url()], controlMode: "explicit" });
    await expect(small.client.repositoryModelLoad({ modelName: "simple" })).rejects.toThrow(
      /failed to load 'simple', its objects hold \d+ bytes, more than GALLEY_S3_MAX_MODEL_BYTES=100/,
    );
    expect(copies()).toEqual([]);
  }, 120_000);
});
