// The runner's claims on a real SQLite store: a job created while a claim is in flight (a claim
// that looked before it existed, as PostgreSQL's can) is claimed when that claim ends, not left
// to the next poll.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { createLogger } from "../base/log.js";
import type { InferenceServer } from "../core/inference-server.js";
import type { Job } from "./job.js";
import { JobEvents } from "./job-events.js";
import { JobRunner } from "./job-runner.js";
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

it("claims again when a job came while a claim was in flight", async () => {
  const dir = mkdtempSync(join(tmpdir(), "galley-runner-"));
  dirs.push(dir);
  const store = new JobStore(await openSqlite(join(dir, "jobs.sqlite")));
  await store.migrate();
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
  let finished!: (job: Job) => void;
  const done = new Promise<Job>((resolve) => (finished = resolve));
  const runner = new JobRunner({
    store,
    // No such model: each job it claims fails at once (the run itself is not under test).
    core: {
      modelConfig: () => {
        throw new Error("no model");
      },
    } as unknown as InferenceServer,
    encoder: {} as VideoEncoder,
    events: new JobEvents(),
    outputs: dir,
    owner: "here",
    concurrency: 1,
    perClient: 0,
    leaseMs: 60_000,
    finished: (job) => finished(job),
    log: createLogger({ write: () => {} }),
  });
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
