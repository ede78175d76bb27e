// A webhook due when its server is killed is not lost: a real `galley serve --videos-api` process
// (a tiny JavaScript video model) ends a job whose webhook receiver (a real HTTP listener) refuses
// it; the server is killed with SIGKILL once the refusal is in the store, started again, and the
// receiver then gets the event with the same webhook-id, the same body and a valid signature.
// With SQLite, also a kill in the middle of an attempt (the receiver holding it open). The same
// with a PostgreSQL store. The outbox is read through the store's own drivers.
import { createHmac } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openPostgres } from "../src/jobs/postgres-driver.js";
import type { SqlDriver } from "../src/jobs/sql-driver.js";
import { openSqlite } from "../src/jobs/sqlite-driver.js";
import { type PostgresCluster, startPostgres } from "./postgres-cluster.js";
import { cleanup, tempRepository, waitFor } from "./support/harness.js";
import { type CliProcess, killChildren, serveArgs, spawnCli } from "./support/process.js";

const SECRET = `whsec_${Buffer.from("a secret of thirty-two bytes!!!!").toString("base64")}`;

const CLIP = `export default class {
  execute(requests) {
    for (const request of requests) {
      const sender = request.responseSender();
      sender.send({ outputs: [
        { name: "STEP", datatype: "INT32", shape: [2], data: Int32Array.of(1, 1) },
        { name: "CLIP", datatype: "UINT8", shape: [1, 4, 4, 3], data: new Uint8Array(48).fill(90) },
      ] }, { final: true });
    }
  }
}`;

/** A repository with one video model, `clip`. */
function repository(): string {
  const repo = tempRepository();
  mkdirSync(join(repo, "clip", "1"), { recursive: true });
  writeFileSync(
    join(repo, "clip", "config.pbtxt"),
    `name: "clip"
backend: "js"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "STEP", data_type: TYPE_INT32, dims: [ 2 ] }, { name: "CLIP", data_type: TYPE_UINT8, dims: [ -1, -1, -1, 3 ] } ]
parameters { key: "videos_api.prompt_input", value: { string_value: "TEXT" } }
parameters { key: "videos_api.progress_output", value: { string_value: "STEP" } }
parameters { key: "videos_api.video_output", value: { string_value: "CLIP" } }
`,
  );
  writeFileSync(join(repo, "clip", "1", "model.mjs"), CLIP);
  return repo;
}

interface Delivery {
  headers: IncomingMessage["headers"];
  body: string;
  res: ServerResponse;
}

/** A webhook receiver that refuses (503), holds (never answers) or takes (204) each delivery. */
interface Receiver {
  url: string;
  mode: "refuse" | "hold" | "take";
  next(): Promise<Delivery>;
}

let receiver: Server | undefined;
const dirs: string[] = [];

afterEach(async () => {
  killChildren();
  await cleanup();
  receiver?.closeAllConnections();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
  receiver = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function receive(): Promise<Receiver> {
  const arrived: Delivery[] = [];
  const waiting: ((d: Delivery) => void)[] = [];
  const hook: Receiver = {
    url: "",
    mode: "refuse",
    next: () => {
      const got = arrived.shift();
      if (got) return Promise.resolve(got);
      return new Promise((resolve, reject) => {
        // A bound, not a wait: retries come within seconds, so this only turns a miss into a message.
        const late = setTimeout(() => reject(new Error("no webhook delivery within 30 s")), 30_000);
        waiting.push((delivery) => {
          clearTimeout(late);
          resolve(delivery);
        });
      });
    },
  };
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      if (hook.mode === "refuse") res.writeHead(503).end();
      else if (hook.mode === "take") res.writeHead(204).end();
      const delivery = { headers: req.headers, body, res };
      const waiter = waiting.shift();
      if (waiter) waiter(delivery);
      else arrived.push(delivery);
    });
  });
  await new Promise<void>((resolve) => receiver?.listen(0, "127.0.0.1", resolve));
  hook.url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
  return hook;
}

/** `galley serve` with the videos API and signed webhooks on `store` (a jobs folder's SQLite, or a URL). */
async function serve(repo: string, jobsDir: string, store?: string): Promise<{ cli: CliProcess; base: string }> {
  const cli = spawnCli(
    serveArgs(repo, [
      "--allow-grpc=false",
      "--allow-metrics=false",
      "--videos-api=true",
      `--jobs-dir=${jobsDir}`,
      "--videos-allow-private-webhooks=true",
      "--videos-ffmpeg=none",
      ...(store ? [`--jobs-store=${store}`] : []),
    ]),
    { ...process.env, GALLEY_VIDEOS_WEBHOOK_SECRET: SECRET },
  );
  const [, address] = await cli.waitFor(/Started HTTPService at (\S+)/);
  return { cli, base: `http://${address}` };
}

async function kill(cli: CliProcess): Promise<void> {
  cli.child.kill("SIGKILL");
  expect(await cli.exited).toBeNull();
}

/** The outbox's rows as the store has them. */
const outbox = (db: SqlDriver) => db.query("SELECT id, attempts, owner FROM galley_webhooks");

/** The delivery's signature checked as a receiver would (node:crypto, not the server's code). */
function signed(delivery: Delivery): boolean {
  const { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature } = delivery.headers;
  const key = Buffer.from(SECRET.slice("whsec_".length), "base64");
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${delivery.body}`).digest("base64");
  return signature === `v1,${expected}` && Math.abs(Number(timestamp) - Date.now() / 1000) < 60;
}

/**
 * A job ended under `first`, its webhook refused; `first` killed once the refusal is stored (one
 * attempt made, no lease held). Resolves with the refused delivery and the video's id.
 */
async function refusedThenKilled(hook: Receiver, first: { cli: CliProcess; base: string }, db: SqlDriver) {
  const answer = await fetch(`${first.base}/v1/videos`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "clip", prompt: "a hook", webhook_url: hook.url }),
  });
  const video = (await answer.json()) as { id: string };
  expect(answer.status).toBe(200);
  const refused = await hook.next();
  await waitFor(
    async () => {
      const rows = await outbox(db);
      return rows.length === 1 && Number(rows[0]?.attempts) === 1 && rows[0]?.owner === null;
    },
    { what: "the refused attempt in the outbox" },
  );
  await kill(first.cli);
  return { refused, id: video.id };
}

/** The delivery is the refused event again: same id and body, a fresh valid signature. */
function expectSameEvent(delivery: Delivery, refused: Delivery, id: string): void {
  expect(delivery.headers["webhook-id"]).toBe(refused.headers["webhook-id"]);
  expect(delivery.body).toBe(refused.body);
  expect(signed(delivery)).toBe(true);
  expect(JSON.parse(delivery.body)).toMatchObject({ type: "video.completed", data: { id, status: "completed" } });
}

describe("webhooks across SIGKILL", () => {
  it("SQLite: a refused event and an attempt cut off mid-flight are sent after restarts, same webhook-id", async () => {
    const repo = repository();
    const jobsDir = mkdtempSync(join(tmpdir(), "galley-hook-restart-"));
    dirs.push(jobsDir);
    const hook = await receive();
    const first = await serve(repo, jobsDir);
    const db = await openSqlite(join(jobsDir, "jobs.sqlite"));
    try {
      const { refused, id } = await refusedThenKilled(hook, first, db);
      expect(signed(refused)).toBe(true);

      // Started again, the event's next attempt comes; the server is killed while it is held open.
      hook.mode = "hold";
      const second = await serve(repo, jobsDir);
      const held = await hook.next();
      expect(held.headers["webhook-id"]).toBe(refused.headers["webhook-id"]);
      await kill(second.cli);

      hook.mode = "take";
      const third = await serve(repo, jobsDir);
      expectSameEvent(await hook.next(), refused, id);
      await waitFor(async () => (await outbox(db)).length === 0, { what: "the delivered event removed" });
      third.cli.child.kill("SIGTERM");
      expect(await third.cli.exited).toBe(0);
    } finally {
      await db.close();
    }
  }, 120_000);

  describe("PostgreSQL", () => {
    let cluster: PostgresCluster;

    beforeAll(async () => {
      cluster = await startPostgres();
    }, 60_000);

    afterAll(async () => {
      await cluster?.stop();
    });

    it("a refused event is sent after the restart, same webhook-id", async () => {
      const repo = repository();
      const jobsDir = mkdtempSync(join(tmpdir(), "galley-hook-restart-"));
      dirs.push(jobsDir);
      const hook = await receive();
      const first = await serve(repo, jobsDir, cluster.url);
      const db = await openPostgres(cluster.url);
      try {
        const { refused, id } = await refusedThenKilled(hook, first, db);
        hook.mode = "take";
        const second = await serve(repo, jobsDir, cluster.url);
        expectSameEvent(await hook.next(), refused, id);
        await waitFor(async () => (await outbox(db)).length === 0, { what: "the delivered event removed" });
        second.cli.child.kill("SIGTERM");
        expect(await second.cli.exited).toBe(0);
      } finally {
        await db.close();
      }
    }, 120_000);
  });
});
