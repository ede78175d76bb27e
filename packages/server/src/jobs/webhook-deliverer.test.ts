// The webhook outbox delivered from a real SQLite store to a real local receiver: retries with the
// same webhook-id and their attempt count kept in the store, an event dropped (and logged) after
// its attempts, a stop that gives its attempt in flight back uncounted, and a deliverer started
// later (a restarted server) sending what an earlier one left.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../base/log.js";
import type { Job } from "./job.js";
import { JobStore } from "./job-store.js";
import { openSqlite } from "./sqlite-driver.js";
import { createWebhookDeliverer, type WebhookDeliverer } from "./webhook-deliverer.js";
import { webhookEvent } from "./webhooks.js";

const SECRET = `whsec_${Buffer.from("0123456789abcdef0123456789abcdef").toString("base64")}`;
const dir = mkdtempSync(join(tmpdir(), "galley-outbox-"));
let files = 0;
let receiver: Server | undefined;
const open: { deliverers: WebhookDeliverer[]; stores: JobStore[] } = { deliverers: [], stores: [] };

afterEach(async () => {
  for (const deliverer of open.deliverers.splice(0)) await deliverer.close();
  for (const store of open.stores.splice(0)) await store.close();
  receiver?.closeAllConnections();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
  receiver = undefined;
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Delivery {
  id: string;
  body: string;
  res: ServerResponse;
}

/** A receiver whose deliveries are awaited one by one (each answered by the test). */
async function receive(): Promise<{ url: string; next: () => Promise<Delivery> }> {
  const arrived: Delivery[] = [];
  const waiting: ((d: Delivery) => void)[] = [];
  receiver = createServer((req: IncomingMessage, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      const delivery = { id: String(req.headers["webhook-id"]), body, res };
      const waiter = waiting.shift();
      if (waiter) waiter(delivery);
      else arrived.push(delivery);
    });
  });
  await new Promise<void>((resolve) => receiver?.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`,
    next: () => {
      const got = arrived.shift();
      return got ? Promise.resolve(got) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

/** A SQLite store (a new file, or `file` again) whose ended jobs record an event to `url`. */
async function store(url: string, log: string[], file = join(dir, `jobs-${files++}.sqlite`)): Promise<JobStore> {
  const opened = new JobStore(await openSqlite(file), {
    event: (job: Job) => webhookEvent(url, `video.${job.status}`, { id: job.id }),
    maxPending: 2,
    log: createLogger({ write: (t) => log.push(t) }),
  });
  await opened.migrate();
  open.stores.push(opened);
  return opened;
}

/** Resolves once the outbox is empty (looked at every 10 ms). */
async function drained(jobs: JobStore): Promise<void> {
  while ((await jobs.pendingWebhooks()) > 0) await new Promise((resolve) => setTimeout(resolve, 10));
}

let serial = 0;
/** A job created, claimed and ended `failed`: its event is in the outbox. */
async function ended(jobs: JobStore): Promise<string> {
  const id = `video_${String(serial++).padStart(32, "0")}`;
  await jobs.create(
    {
      id,
      model: "m",
      prompt: "p",
      size: "64x64",
      frames: 1,
      steps: 1,
      priority: "normal",
      status: "queued",
      progress: 0,
      createdAt: 1,
      expiresAt: 2,
      client: "",
      requestDigest: id,
      attempts: 0,
      outputs: {},
    },
    100,
  );
  await jobs.claim("runner", Date.now(), Date.now() + 60_000, 0);
  await jobs.finish(id, "failed", { now: Date.now(), owner: "runner", error: { code: "x", message: "y" } });
  return id;
}

function deliver(jobs: JobStore, log: string[], options: { attempts?: number } = {}): WebhookDeliverer {
  const deliverer = createWebhookDeliverer(
    jobs,
    { secret: SECRET, allowPrivate: true, backoffMs: 10, ...options },
    `server ${open.deliverers.length}`,
    60_000,
    createLogger({ write: (t) => log.push(t) }),
  );
  open.deliverers.push(deliverer);
  return deliverer;
}

describe("the webhook deliverer", () => {
  it("retries a refused event with the same id until it is taken, then removes it", async () => {
    const hook = await receive();
    const log: string[] = [];
    const jobs = await store(hook.url, log);
    const job = await ended(jobs);
    expect(await jobs.pendingWebhooks()).toBe(1);
    deliver(jobs, log);
    const attempts = [];
    for (const status of [500, 503, 204]) {
      const delivery = await hook.next();
      attempts.push(delivery);
      delivery.res.writeHead(status).end();
    }
    expect(new Set(attempts.map((a) => a.id)).size).toBe(1);
    expect(new Set(attempts.map((a) => a.body)).size).toBe(1);
    expect(JSON.parse(attempts[0]?.body ?? "")).toMatchObject({ type: "video.failed", data: { id: job } });
    await drained(jobs);
  });

  it("drops an event after its attempts, logged", async () => {
    const hook = await receive();
    const log: string[] = [];
    const jobs = await store(hook.url, log);
    const job = await ended(jobs);
    deliver(jobs, log, { attempts: 2 });
    for (let i = 0; i < 2; i++) (await hook.next()).res.writeHead(500).end();
    await drained(jobs);
    expect(log.join("")).toMatch(new RegExp(`webhook msg_\\w+ for ${job} to .* failed 2 times, dropped: answered 500`));
  });

  it("records no event past the pending limit, and says so", async () => {
    const log: string[] = [];
    const jobs = await store("http://127.0.0.1:9/hook", log);
    for (let i = 0; i < 3; i++) await ended(jobs);
    expect(await jobs.pendingWebhooks()).toBe(2);
    expect(log.join("")).toMatch(/dropped: 2 already waiting/);
  });

  it("gives an attempt cut short by a stop back uncounted; a later deliverer sends it with the same id", async () => {
    const hook = await receive();
    const log: string[] = [];
    const file = join(dir, "restarted.sqlite");
    const jobs = await store(hook.url, log, file);
    await ended(jobs);
    const first = deliver(jobs, log, { attempts: 1 });
    const held = await hook.next();
    await first.close();
    held.res.destroy();
    // Uncounted: with one attempt allowed, the next deliverer still makes it.
    const again = deliver(await store(hook.url, log, file), log, { attempts: 1 });
    const delivery = await hook.next();
    expect(delivery.id).toBe(held.id);
    expect(delivery.body).toBe(held.body);
    delivery.res.writeHead(200).end();
    await drained(jobs);
    await again.close();
    expect(log.join("")).not.toMatch(/dropped/);
  });
});
