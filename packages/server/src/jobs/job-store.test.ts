// The job store on a real SQLite file and a real PostgreSQL cluster (started here): the same
// behaviour from both, and PostgreSQL's claims shared by several stores without a job run twice.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresCluster, startPostgres } from "../../test/postgres-cluster.js";
import { createLogger } from "../base/log.js";
import type { Job, PriorityClass } from "./job.js";
import { JobStore, type OutboxOptions } from "./job-store.js";
import { openPostgres } from "./postgres-driver.js";
import { openSqlite } from "./sqlite-driver.js";

let cluster: PostgresCluster;
let dir: string;
let databases = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "galley-store-"));
  cluster = await startPostgres();
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A fresh, empty store of each kind (a new file; a new PostgreSQL database). */
const kinds: Record<string, (outbox?: OutboxOptions) => Promise<JobStore>> = {
  sqlite: async (outbox) => {
    const store = new JobStore(await openSqlite(join(dir, `jobs-${databases++}.sqlite`)), outbox);
    await store.migrate();
    return store;
  },
  postgres: async (outbox) => {
    const name = `jobs_${databases++}`;
    const admin = await openPostgres(cluster.url);
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.close();
    const store = new JobStore(await openPostgres(cluster.url.replace("/postgres?", `/${name}?`)), outbox);
    await store.migrate();
    return store;
  },
};

/** An outbox recording `<status> <job id>` events to one URL for the jobs with a webhook_url. */
const outbox = (log: string[] = [], maxPending = 100): OutboxOptions => ({
  event: (j) => (j.webhookUrl ? { id: `msg_${j.id}`, url: j.webhookUrl, body: `${j.status} ${j.id}` } : undefined),
  maxPending,
  log: createLogger({ write: (t) => log.push(t) }),
});

let serial = 0;
function job(overrides: Partial<Job> = {}): Omit<Job, "seq"> {
  const n = serial++;
  return {
    id: `video_${String(n).padStart(32, "0")}`,
    model: "m",
    prompt: `prompt ${n}`,
    size: "64x64",
    frames: 3,
    steps: 2,
    priority: "normal",
    status: "queued",
    progress: 0,
    createdAt: 1000,
    expiresAt: 2000,
    client: "",
    requestDigest: `digest ${n}`,
    attempts: 0,
    outputs: {},
    ...overrides,
  };
}

async function created(store: JobStore, overrides: Partial<Job> = {}, maxQueued = 100): Promise<Job> {
  const result = await store.create(job(overrides), maxQueued);
  if (result.kind !== "created") throw new Error(result.kind);
  return result.job;
}

describe.each(Object.keys(kinds))("the %s store", (kind) => {
  const open = kinds[kind] as (outbox?: OutboxOptions) => Promise<JobStore>;

  it("queues by priority class, then age, and claims in that order", async () => {
    const store = await open();
    const classes: PriorityClass[] = ["low", "normal", "high", "normal"];
    const jobs = [];
    for (const priority of classes) jobs.push(await created(store, { priority }));
    expect(await Promise.all(jobs.map((j) => store.queuePosition(j)))).toEqual([3, 1, 0, 2]);
    const order = [];
    for (let i = 0; i < 4; i++) order.push((await store.claim("me", 0, 10_000, 0))?.id);
    expect(order).toEqual([jobs[2]?.id, jobs[1]?.id, jobs[3]?.id, jobs[0]?.id]);
    expect(await store.claim("me", 0, 10_000, 0)).toBeUndefined();
    expect(await store.get(jobs[0]?.id as string)).toMatchObject({ status: "in_progress", attempts: 1 });
    await store.close();
  });

  it("answers a repeated idempotency key with the first job, per client, and bounds the queue", async () => {
    const store = await open();
    const first = await created(store, { idempotencyKey: "k", requestDigest: "same" });
    const again = await store.create(job({ idempotencyKey: "k", requestDigest: "same" }), 100);
    expect(again).toMatchObject({ kind: "existing", job: { id: first.id } });
    const other = await store.create(job({ idempotencyKey: "k", requestDigest: "other" }), 100);
    expect(other).toMatchObject({ kind: "key-reused", job: { id: first.id } });
    // Another client's key is another key.
    expect((await store.create(job({ idempotencyKey: "k", client: "bob" }), 100)).kind).toBe("created");
    expect(await store.create(job(), 2)).toEqual({ kind: "queue-full", queued: 2 });
    await store.close();
  });

  it("holds a client's running jobs to its limit", async () => {
    const store = await open();
    const a1 = await created(store, { client: "alice" });
    await created(store, { client: "alice" });
    const b1 = await created(store, { client: "bob" });
    expect((await store.claim("me", 0, 10_000, 1))?.id).toBe(a1.id);
    expect((await store.claim("me", 0, 10_000, 1))?.id).toBe(b1.id);
    expect(await store.claim("me", 0, 10_000, 1)).toBeUndefined();
    await store.finish(a1.id, "completed", { now: 5000, owner: "me" });
    expect((await store.claim("me", 0, 10_000, 1))?.client).toBe("alice");
    await store.close();
  });

  it("queues a job whose lease ran out again, and fails it after its last attempt", async () => {
    const store = await open();
    const one = await created(store);
    await store.claim("crashed", 0, 1000, 0);
    expect(await store.recover(500, 2)).toEqual([]);
    expect((await store.get(one.id))?.status).toBe("in_progress");
    expect(await store.recover(1500, 2)).toEqual([]);
    expect(await store.get(one.id)).toMatchObject({ status: "queued", progress: 0, attempts: 1 });
    await store.claim("crashed again", 2000, 3000, 0);
    const failed = await store.recover(4000, 2);
    expect(failed.map((j) => [j.id, j.status, j.error?.code])).toEqual([[one.id, "failed", "interrupted"]]);
    // A lease renewed in time holds.
    const two = await created(store);
    await store.claim("alive", 0, 1000, 0);
    await store.renew("alive", 9000);
    await store.recover(5000, 2);
    expect((await store.get(two.id))?.status).toBe("in_progress");
    await store.close();
  });

  it("stops a cancelled job's progress and keeps a final status final", async () => {
    const store = await open();
    const one = await created(store);
    await store.claim("me", 0, 10_000, 0);
    expect(await store.progress(one.id, "me", 40, { preview: "preview.png" })).toBe(true);
    expect(await store.progress(one.id, "someone else", 50, {})).toBe(false);
    expect(await store.finish(one.id, "cancelled", { now: 3000 })).toMatchObject({ status: "cancelled", progress: 40 });
    expect(await store.progress(one.id, "me", 60, {})).toBe(false);
    expect(await store.finish(one.id, "completed", { now: 4000, owner: "me" })).toBeUndefined();
    expect((await store.get(one.id))?.status).toBe("cancelled");
    await store.close();
  });

  it("pages a client's jobs and expires finished ones", async () => {
    const store = await open();
    const mine = [];
    for (let i = 0; i < 5; i++) mine.push(await created(store, { client: "me", expiresAt: 10 + i }));
    await created(store, { client: "other" });
    const page = await store.list("me", 2, "desc");
    expect(page.jobs.map((j) => j.id)).toEqual([mine[4]?.id, mine[3]?.id]);
    expect(page.hasMore).toBe(true);
    const rest = await store.list("me", 10, "desc", page.jobs[1]);
    expect(rest.jobs.map((j) => j.id)).toEqual([mine[2]?.id, mine[1]?.id, mine[0]?.id]);
    expect(rest.hasMore).toBe(false);
    for (const j of mine.slice(0, 3))
      await store.finish(j.id, "failed", { now: 0, error: { code: "x", message: "y" } });
    // Expired by time, but a queued job is never deleted under its client.
    expect((await store.expire(20_000)).sort()).toEqual(
      mine
        .slice(0, 3)
        .map((j) => j.id)
        .sort(),
    );
    expect((await store.list("me", 10, "asc")).jobs.map((j) => j.id)).toEqual([mine[3]?.id, mine[4]?.id]);
    await store.close();
  });
});

describe.each(Object.keys(kinds))("the %s store's webhook outbox", (kind) => {
  const open = kinds[kind] as (outbox?: OutboxOptions) => Promise<JobStore>;
  const hook = { webhookUrl: "https://example.com/hook" };

  it("records a job's event when it ends, in the same transaction, and never twice", async () => {
    const store = await open(outbox());
    const done = await created(store, hook);
    await store.claim("me", 0, 10_000, 0);
    const quiet = await created(store);
    await store.finish(done.id, "completed", { now: 5000, owner: "me" });
    // Final already, or no webhook_url: nothing more.
    expect(await store.finish(done.id, "cancelled", { now: 6000 })).toBeUndefined();
    await store.finish(quiet.id, "cancelled", { now: 6000 });
    expect(await store.pendingWebhooks()).toBe(1);
    const [event] = await store.claimWebhooks("server", 7000, 8000, 10);
    expect(event).toEqual({
      id: `msg_${done.id}`,
      jobId: done.id,
      url: hook.webhookUrl,
      body: `completed ${done.id}`,
      attempts: 1,
    });
    // An event that cannot be written leaves the job as it was.
    const failing = await open({
      ...outbox(),
      event: () => {
        throw new Error("no event");
      },
    });
    const kept = await created(failing, hook);
    await expect(failing.finish(kept.id, "cancelled", { now: 1 })).rejects.toThrow("no event");
    expect((await failing.get(kept.id))?.status).toBe("queued");
    await failing.close();
    await store.close();
  });

  it("records the event of a job failed after a crash, and bounds the outbox", async () => {
    const log: string[] = [];
    const store = await open(outbox(log, 1));
    const crashed = await created(store, hook);
    await store.claim("crashed", 0, 1000, 0);
    expect((await store.recover(2000, 1)).map((j) => j.id)).toEqual([crashed.id]);
    const [event] = await store.claimWebhooks("server", 3000, 4000, 10);
    expect(event?.body).toBe(`failed ${crashed.id}`);
    const over = await created(store, hook);
    expect(await store.finish(over.id, "cancelled", { now: 5000 })).toMatchObject({ status: "cancelled" });
    expect(await store.pendingWebhooks()).toBe(1);
    expect(log.join("")).toContain(`webhook msg_${over.id} for ${over.id} (cancelled) to ${hook.webhookUrl} dropped`);
    await store.close();
  });

  it("leases an event to one server, keeps its attempts, and removes it when delivered", async () => {
    const store = await open(outbox());
    const one = await created(store, hook);
    await store.finish(one.id, "cancelled", { now: 0 });
    expect(await store.claimWebhooks("a", 1000, 5000, 10)).toHaveLength(1);
    // Leased: nobody else's until the lease runs out.
    expect(await store.claimWebhooks("b", 2000, 6000, 10)).toEqual([]);
    // A's attempt failed: due again at 8000, its attempt counted.
    await store.webhookFailed(`msg_${one.id}`, "a", 8000);
    expect(await store.claimWebhooks("b", 7999, 20_000, 10)).toEqual([]);
    expect((await store.claimWebhooks("b", 8000, 20_000, 10))[0]?.attempts).toBe(2);
    // B crashed mid-attempt: its lease runs out and the event is due again for A.
    expect((await store.claimWebhooks("a", 20_001, 30_000, 10))[0]?.attempts).toBe(3);
    // B's late result does not touch A's lease; A's stop gives its attempt back.
    await store.webhookFailed(`msg_${one.id}`, "b", 50_000);
    await store.releaseWebhooks("a");
    expect((await store.claimWebhooks("b", 20_002, 30_000, 10))[0]?.attempts).toBe(3);
    await store.webhookDelivered(`msg_${one.id}`);
    expect(await store.pendingWebhooks()).toBe(0);
    // At the start of the only server on an embedded store, every lease ends.
    const two = await created(store, hook);
    await store.finish(two.id, "cancelled", { now: 0 });
    await store.claimWebhooks("gone", 1000, 99_000, 10);
    await store.expireLeases();
    expect(await store.claimWebhooks("new", 1001, 99_000, 10)).toHaveLength(1);
    await store.close();
  });
});

describe("PostgreSQL shared by several servers", () => {
  it("leases each webhook event to one server when four claim at the same time", async () => {
    const first = await kinds.postgres?.(outbox());
    if (!first) throw new Error("no store");
    for (let i = 0; i < 40; i++) {
      const one = await created(first, { webhookUrl: "https://example.com/hook" });
      await first.finish(one.id, "cancelled", { now: 0 });
    }
    const url = cluster.url.replace("/postgres?", `/jobs_${databases - 1}?`);
    const stores = [first, ...(await Promise.all([1, 2, 3].map(async () => new JobStore(await openPostgres(url)))))];
    const claimed = await Promise.all(
      stores.map(async (store, n) => {
        const ids: string[] = [];
        for (;;) {
          const got = await store.claimWebhooks(`server ${n}`, 1000, 60_000, 3);
          if (got.length === 0) return ids;
          ids.push(...got.map((e) => e.id));
        }
      }),
    );
    const all = claimed.flat();
    expect(all).toHaveLength(40);
    expect(new Set(all).size).toBe(40);
    for (const store of stores) await store.close();
  });

  it("claims each job once when four stores claim at the same time (FOR UPDATE SKIP LOCKED)", async () => {
    const first = await kinds.postgres?.();
    if (!first) throw new Error("no store");
    for (let i = 0; i < 40; i++) await created(first);
    const url = cluster.url.replace("/postgres?", `/jobs_${databases - 1}?`);
    const stores = [first, ...(await Promise.all([1, 2, 3].map(async () => new JobStore(await openPostgres(url)))))];
    const claimed = await Promise.all(
      stores.map(async (store, n) => {
        const ids: string[] = [];
        for (;;) {
          const got = await store.claim(`server ${n}`, 0, 10_000, 0);
          if (!got) return ids;
          ids.push(got.id);
        }
      }),
    );
    const all = claimed.flat();
    expect(all).toHaveLength(40);
    expect(new Set(all).size).toBe(40);
    for (const store of stores) await store.close();
  });
});
