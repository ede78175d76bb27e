// The videos API's webhooks from a real server to a local receiver (allowed by the flag), for a
// completed and a cancelled video; the event-stream limit; event streams ended at shutdown;
// retention; and the PostgreSQL store serving the same API.
import { createHmac } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresCluster, startPostgres } from "../../../packages/server/test/postgres-cluster.js";
import { call, readEvents, startVideosServer, type VideosServer, waitFor } from "./videos-helpers.js";

const SECRET = `whsec_${Buffer.from("a secret of thirty-two bytes!!!!").toString("base64")}`;
const small = { model: "text_to_video", prompt: "a hook", size: "64x64", frames: 3, steps: 2 };

let receiver: Server;
let hookUrl: string;
const received: { headers: IncomingMessage["headers"]; body: string }[] = [];
const waiting: (() => void)[] = [];

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      res.writeHead(204).end();
      received.push({ headers: req.headers, body });
      for (const wake of waiting.splice(0)) wake();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
});

afterAll(async () => {
  await new Promise((resolve) => receiver.close(resolve));
});

/** The webhook for `id`, once it has arrived. */
async function hookFor(id: string) {
  for (;;) {
    const found = received.find((r) => JSON.parse(r.body).data.id === id);
    if (found) return found;
    await new Promise<void>((resolve) => waiting.push(resolve));
  }
}

describe("webhooks, event streams and retention", () => {
  let api: VideosServer;

  beforeAll(async () => {
    api = await startVideosServer({
      concurrency: 1,
      webhooks: { secret: SECRET },
      allowPrivateWebhooks: true,
      maxEventStreams: 2,
      retentionSecs: 2,
    });
  });

  afterAll(async () => {
    await api?.close();
  });

  it("posts signed video.completed and video.cancelled events", async () => {
    const done = await call(api.base, "POST", "/v1/videos", { ...small, webhook_url: hookUrl });
    expect(done.status).toBe(200);
    const hook = await hookFor(done.body.id);
    const payload = JSON.parse(hook.body);
    expect(payload).toMatchObject({
      type: "video.completed",
      data: { id: done.body.id, object: "video", status: "completed", progress: 100 },
    });
    const { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature } = hook.headers;
    const key = Buffer.from(SECRET.slice(6), "base64");
    expect(signature).toBe(
      `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.${hook.body}`).digest("base64")}`,
    );

    const cancelled = await call(api.base, "POST", "/v1/videos", { ...small, steps: 1000, webhook_url: hookUrl });
    await waitFor(api.base, cancelled.body.id, (v) => v.status === "in_progress");
    await call(api.base, "DELETE", `/v1/videos/${cancelled.body.id}`);
    expect(JSON.parse((await hookFor(cancelled.body.id)).body)).toMatchObject({
      type: "video.cancelled",
      data: { status: "cancelled" },
    });
  });

  it("refuses malformed and non-http webhook URLs", async () => {
    for (const webhook_url of [
      "nope",
      "ftp://example.com/x",
      "https://u:p@example.com/",
      42,
      `https://example.com/${"a".repeat(3000)}`,
    ]) {
      const answer = await call(api.base, "POST", "/v1/videos", { ...small, webhook_url });
      expect(answer.status, String(webhook_url).slice(0, 40)).toBe(400);
      expect(answer.body.error.param).toBe("webhook_url");
    }
  });

  it("answers 429 past the open event-stream limit, and frees a slot when a stream ends", async () => {
    const blocker = await call(api.base, "POST", "/v1/videos", { ...small, steps: 1000 });
    const url = `${api.base}/v1/videos/${blocker.body.id}/events`;
    const opened: AbortController[] = [];
    for (let i = 0; i < 2; i++) {
      const controller = new AbortController();
      const res = await fetch(url, { signal: controller.signal });
      expect(res.status).toBe(200);
      opened.push(controller);
    }
    const third = await call(api.base, "GET", `/v1/videos/${blocker.body.id}/events`);
    expect(third.status).toBe(429);
    expect(third.body.error.code).toBe("too_many_event_streams");
    for (const controller of opened) controller.abort();
    // The slots free as the server sees the clients go: a new stream then opens.
    for (;;) {
      const res = await fetch(url);
      if (res.status === 200) {
        await res.body?.cancel();
        break;
      }
      await res.text();
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await call(api.base, "DELETE", `/v1/videos/${blocker.body.id}`);
  });

  it("deletes a finished video and its outputs once its retention has passed", async () => {
    const video = await call(api.base, "POST", "/v1/videos", small);
    const done = await waitFor(api.base, video.body.id, (v) => v.status === "completed");
    expect(done.expires_at - done.created_at).toBe(2);
    for (;;) {
      const answer = await call(api.base, "GET", `/v1/videos/${video.body.id}`);
      if (answer.status === 404) break;
      expect(answer.body.status).toBe("completed");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect((await fetch(`${api.base}/v1/videos/${video.body.id}/content`)).status).toBe(404);
  });
});

describe("MP4 through ffmpeg (on PATH: CI installs Debian's)", () => {
  it("encodes the video as H.264 in MP4", async () => {
    const api = await startVideosServer({ ffmpeg: "ffmpeg" });
    try {
      const video = await call(api.base, "POST", "/v1/videos", small);
      await waitFor(api.base, video.body.id, (v) => v.status === "completed");
      const content = await fetch(`${api.base}/v1/videos/${video.body.id}/content`);
      expect(content.headers.get("content-type")).toBe("video/mp4");
      const bytes = Buffer.from(await content.arrayBuffer());
      expect(bytes.subarray(4, 8).toString("latin1")).toBe("ftyp");
      expect(bytes.includes(Buffer.from("avc1"))).toBe(true);
    } finally {
      await api.close();
    }
  });
});

describe("the PostgreSQL store", () => {
  let cluster: PostgresCluster;

  beforeAll(async () => {
    cluster = await startPostgres();
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  it("serves the same API, and two servers on one database share its queue", async () => {
    const one = await startVideosServer({ store: cluster.url, concurrency: 1 });
    const two = await startVideosServer({ store: cluster.url, concurrency: 1 });
    try {
      const ids = [];
      for (let i = 0; i < 4; i++)
        ids.push((await call(one.base, "POST", "/v1/videos", { ...small, prompt: `shared ${i}` })).body.id);
      // Either server answers for any job; each job completes once.
      for (const id of ids) await waitFor(two.base, id, (v) => v.status === "completed");
      const events = await readEvents(`${two.base}/v1/videos/${ids[0]}/events`);
      expect(events.map((e) => e.data.status)).toEqual(["completed"]);
      const list = await call(two.base, "GET", "/v1/videos?order=asc");
      expect(list.body.data.map((v: { id: string }) => v.id)).toEqual(ids);
    } finally {
      await one.close();
      await two.close();
    }
  });
});
