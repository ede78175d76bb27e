// The runner's claims on a real SQLite store: a job created while a claim is in flight (a claim
// that looked before it existed, as PostgreSQL's can) is claimed when that claim ends, not left
// to the next poll; a job's pipeline slot goes to the next job when its model's stream ends, while
// it still encodes its files, and no more than `concurrency` jobs are encoding at once.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInputSchema, ModelOutputSchema, ModelParameterSchema } from "@galley/proto";
import { afterEach, expect, it } from "vitest";
import { createLogger } from "../base/log.js";
import type { InferenceServer } from "../core/inference-server.js";
import type { Job } from "./job.js";
import { JobEvents } from "./job-events.js";
import { JobRunner, type JobRunnerOptions } from "./job-runner.js";
import { JobStore } from "./job-store.js";
import { openSqlite } from "./sqlite-driver.js";
import type { VideoEncoder } from "./video-encoder.js";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function job(id: string): Omit<Job, "seq"> {
  return {
    id,
    model: "missing",
    prompt: "p",
    size: "",
    frames: 0,
    steps: 0,
    priority: "normal",
    status: "queued",
    progress: 0,
    createdAt: 1,
    expiresAt: 2 ** 31,
    client: "",
    requestDigest: id,
    attempts: 0,
    outputs: {},
  };
}

/** A real SQLite store in a fresh folder, and a runner over it running one job at a time. */
async function setUp(parts: Pick<JobRunnerOptions, "core" | "encoder" | "finished">) {
  const dir = mkdtempSync(join(tmpdir(), "galley-runner-"));
  dirs.push(dir);
  const store = new JobStore(await openSqlite(join(dir, "jobs.sqlite")));
  await store.migrate();
  const runner = new JobRunner({
    store,
    events: new JobEvents(),
    outputs: dir,
    owner: "here",
    concurrency: 1,
    perClient: 0,
    leaseMs: 60_000,
    log: createLogger({ write: () => {} }),
    ...parts,
  });
  return { store, runner };
}

it("claims again when a job came while a claim was in flight", async () => {
  let finished!: (job: Job) => void;
  const done = new Promise<Job>((resolve) => (finished = resolve));
  const { store, runner } = await setUp({
    // No such model: each job it claims fails at once (the run itself is not under test).
    core: {
      modelConfig: () => {
        throw new Error("no model");
      },
    } as unknown as InferenceServer,
    encoder: {} as VideoEncoder,
    finished: (job) => finished(job),
  });
  // The first claim looks at an empty queue, then waits for the gate before it answers.
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const claim = store.claim.bind(store);
  let claims = 0;
  store.claim = async (...args) => {
    const found = await claim(...args);
    if (++claims === 1) await gate;
    return found;
  };
  const first = runner.fill();
  await store.create(job("video_a"), 10);
  await runner.fill(); // the claim in flight answers for it
  open();
  await first;
  // Claimed by the claim that fill asked for again, before any poll.
  expect(claims).toBe(2);
  expect([(await done).id, (await done).status]).toEqual(["video_a", "failed"]);
  await runner.stop();
});

/** A gate per name: `wait(name)` resolves when `open(name)` is called (before or after). */
function gates() {
  const opened = new Map<string, () => void>();
  const waits = new Map<string, Promise<void>>();
  const get = (name: string) => {
    let wait = waits.get(name);
    if (!wait) {
      wait = new Promise<void>((resolve) => opened.set(name, resolve));
      waits.set(name, wait);
    }
    return wait;
  };
  const open = (name: string) => {
    get(name);
    opened.get(name)?.();
  };
  return { wait: get, open };
}

it("gives a job's pipeline slot to the next job once its stream ends, and bounds the jobs encoding", async () => {
  const config = create(ModelConfigSchema, {
    name: "pipe",
    input: [create(ModelInputSchema, { name: "PROMPT", dataType: DataType.TYPE_STRING, dims: [1n] })],
    output: [create(ModelOutputSchema, { name: "VIDEO", dataType: DataType.TYPE_UINT8, dims: [-1n, -1n, -1n, 3n] })],
    parameters: {
      "videos_api.prompt_input": create(ModelParameterSchema, { stringValue: "PROMPT" }),
      "videos_api.video_output": create(ModelParameterSchema, { stringValue: "VIDEO" }),
    },
  });
  const streams = gates();
  const encodes = gates();
  const started: string[] = [];
  const encoding: string[] = [];
  // The pipeline: one response with a 1-frame video, sent when the test opens the job's gate.
  const core = {
    modelConfig: () => config,
    stream: (request: { id: string }) => ({
      async *[Symbol.asyncIterator]() {
        started.push(request.id);
        await streams.wait(request.id);
        const video = { name: "VIDEO", datatype: "UINT8", shape: [1, 1, 1, 3], data: new Uint8Array(3) };
        yield { response: { outputs: [video] }, empty: false };
      },
    }),
    tracing: { sample: () => undefined },
  } as unknown as InferenceServer;
  const encoder = {
    format: { extension: "gif", contentType: "image/gif" },
    video: async (_frames: unknown, _fps: number, path: string) => {
      const id = path.split("/").at(-2) ?? "";
      encoding.push(id);
      await encodes.wait(id);
    },
    still: async () => {},
    close: async () => {},
  } as unknown as VideoEncoder;
  const finished: string[] = [];
  let onFinished = () => {};
  const { store, runner } = await setUp({
    core,
    encoder,
    finished: (done) => {
      finished.push(done.id);
      onFinished();
    },
  });
  // A bounded wait for the runner's promises and the store's statements to settle.
  const until = async (what: () => boolean) => {
    for (let turn = 0; !what(); turn++) {
      if (turn > 100_000) throw new Error(`never came: ${what}; started ${started}, encoding ${encoding}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  for (const id of ["video_a", "video_b", "video_c"]) await store.create({ ...job(id), model: "pipe" }, 10);
  await runner.fill();
  await until(() => started.length === 1);
  expect(started).toEqual(["video_a"]);
  // a's stream ends: b's pipeline starts while a is still encoding.
  streams.open("video_a");
  await until(() => started.length === 2);
  expect(encoding).toEqual(["video_a"]);
  expect(started).toEqual(["video_a", "video_b"]);
  // b's stream ends too: with a and b encoding (as many as pipelines may run), c waits.
  streams.open("video_b");
  await until(() => encoding.length === 2);
  expect(started).toEqual(["video_a", "video_b"]);
  expect(runner.running).toBe(2);
  // a's files are written: c starts.
  const aDone = new Promise<void>((resolve) => (onFinished = resolve));
  encodes.open("video_a");
  await aDone;
  await until(() => started.length === 3);
  expect(started).toEqual(["video_a", "video_b", "video_c"]);
  streams.open("video_c");
  encodes.open("video_b");
  encodes.open("video_c");
  await until(() => finished.length === 3);
  expect(finished.sort()).toEqual(["video_a", "video_b", "video_c"]);
  expect((await store.get("video_c"))?.status).toBe("completed");
  await runner.stop();
});
