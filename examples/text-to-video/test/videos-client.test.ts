// @galley/client's videos calls against a real server with the videos API over the example's CPU
// pipeline (64x64, a few steps): the client's types against the served OpenAPI document, the
// calls, their typed errors, events (aborted, and followed through a server restart), API keys.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  type CreateVideoRequest,
  createVideosClient,
  type Video,
  type VideoApiErrorBody,
  type VideoEvent,
  type VideoList,
  type VideoPriority,
  type VideoStatus,
  VideosApiError,
} from "@galley/client";
import { createLogger, createServer } from "@galley/server";
import { GifReader } from "omggif";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODELS, startVideosServer, type VideosServer } from "./videos-helpers.js";

// Every field of the client's types, listed so that the compiler refuses a missing or extra one.
const VIDEO_FIELDS = {
  id: 1,
  object: 1,
  model: 1,
  status: 1,
  progress: 1,
  queue_position: 1,
  created_at: 1,
  completed_at: 1,
  expires_at: 1,
  size: 1,
  seconds: 1,
  frames: 1,
  steps: 1,
  prompt: 1,
  priority: 1,
  error: 1,
} satisfies Record<keyof Video, 1>;
const CREATE_FIELDS = {
  model: 1,
  prompt: 1,
  size: 1,
  seconds: 1,
  frames: 1,
  steps: 1,
  seed: 1,
  priority: 1,
  webhook_url: 1,
} satisfies Record<keyof CreateVideoRequest, 1>;
const LIST_FIELDS = { object: 1, data: 1, first_id: 1, last_id: 1, has_more: 1 } satisfies Record<keyof VideoList, 1>;
const ERROR_FIELDS = { message: 1, type: 1, param: 1, code: 1 } satisfies Record<keyof VideoApiErrorBody["error"], 1>;
const STATUSES = { queued: 1, in_progress: 1, completed: 1, failed: 1, cancelled: 1 } satisfies Record<VideoStatus, 1>;
const PRIORITIES = { high: 1, normal: 1, low: 1 } satisfies Record<VideoPriority, 1>;

const small = { model: "text_to_video", prompt: "a red fox running in snow", size: "64x64", frames: 3, steps: 2 };
const sorted = (o: object) => Object.keys(o).sort();

let api: VideosServer;

beforeAll(async () => {
  api = await startVideosServer({ concurrency: 1 });
});

afterAll(async () => {
  await api?.close();
});

/** A failure of `promise`, which must reject. */
async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => expect.fail("resolved"),
    (error: unknown) => error,
  );
}

describe("the client's types", () => {
  it("name exactly the fields and values of the served OpenAPI document", async () => {
    // biome-ignore lint/suspicious/noExplicitAny: the document as JSON
    const doc: any = await (await fetch(`${api.base}/v1/openapi.json`)).json();
    const schemas = doc.components.schemas;
    expect(sorted(VIDEO_FIELDS)).toEqual(Object.keys(schemas.Video.properties).sort());
    expect(sorted(CREATE_FIELDS)).toEqual(Object.keys(schemas.CreateVideo.properties).sort());
    expect(sorted(STATUSES)).toEqual([...schemas.Video.properties.status.enum].sort());
    expect(sorted(PRIORITIES)).toEqual([...schemas.CreateVideo.properties.priority.enum].sort());
    const list = doc.paths["/v1/videos"].get.responses[200].content["application/json"].schema;
    expect(sorted(LIST_FIELDS)).toEqual(Object.keys(list.properties).sort());
    const error = doc.components.responses.Error.content["application/json"].schema.properties.error;
    expect(sorted(ERROR_FIELDS)).toEqual(Object.keys(error.properties).sort());
    const variants = doc.paths["/v1/videos/{video_id}/content"].parameters[1].schema.enum;
    expect(variants).toEqual(["video", "thumbnail", "preview"]);
  });
});

describe("videos.*", () => {
  it("creates, follows the events to completion, downloads, lists, and deletes", async () => {
    const videos = createVideosClient({ baseUrl: `${api.base}/` });
    const created = await videos.create({ ...small, steps: 6 }, { idempotencyKey: "client-test-1" });
    expect(created).toMatchObject({ object: "video", status: "queued", size: "64x64", frames: 3, steps: 6 });
    const again = await videos.create({ ...small, steps: 6 }, { idempotencyKey: "client-test-1" });
    expect(again.id).toBe(created.id);
    const events: VideoEvent[] = [];
    for await (const event of videos.events(created.id)) events.push(event);
    const last = events.at(-1);
    expect(last?.type === "video" && last.video.status).toBe("completed");
    const preview = events.find((e) => e.type === "preview");
    expect(preview).toMatchObject({ id: created.id, url: `/v1/videos/${created.id}/content?variant=preview` });
    expect(events.some((e) => e.type === "progress")).toBe(true);

    const video = await videos.get(created.id);
    expect(video).toMatchObject({ status: "completed", progress: 100 });
    const content = await videos.content(created.id);
    expect(content.contentType).toBe("image/gif");
    const bytes = await content.bytes();
    const gif = new GifReader(bytes);
    expect([gif.numFrames(), gif.width, gif.height]).toEqual([3, 64, 64]);
    await expect(content.bytes()).rejects.toThrow(/once/);
    const thumbnail = await videos.content(created.id, { variant: "thumbnail" });
    expect(thumbnail.contentType).toBe("image/png");
    const chunks: Uint8Array[] = [];
    for await (const chunk of thumbnail.stream()) chunks.push(chunk);
    // PNG's signature, then its IHDR: 64x64.
    const png = Buffer.concat(chunks);
    expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    expect([png.readUInt32BE(16), png.readUInt32BE(20)]).toEqual([64, 64]);

    const second = await videos.create(small);
    const page = await videos.list({ limit: 1 });
    expect(page).toMatchObject({ object: "list", has_more: true, first_id: second.id, last_id: second.id });
    const next = await videos.list({ limit: 1, after: page.last_id as string });
    expect(next.data[0]?.id).toBe(created.id);
    const oldest = await videos.list({ limit: 100, order: "asc" });
    expect(oldest.data.map((v) => v.id).indexOf(created.id)).toBeLessThan(
      oldest.data.map((v) => v.id).indexOf(second.id),
    );

    expect(await videos.cancel(created.id)).toEqual({ id: created.id, object: "video.deleted", deleted: true });
    const gone = await failure(videos.get(created.id));
    expect(gone).toBeInstanceOf(VideosApiError);
    expect(gone).toMatchObject({ status: 404, type: "invalid_request_error", code: "video_not_found", param: null });
  });

  it("cancels a queued video, and answers each error with the API's fields and status", async () => {
    const videos = createVideosClient({ baseUrl: api.base });
    const running = await videos.create({ ...small, steps: 40 });
    const queued = await videos.create(small, { timeoutMs: 10_000 });
    const cancelled = await videos.cancel(queued.id);
    expect(cancelled).toMatchObject({ id: queued.id, object: "video", status: "cancelled" });
    const events: VideoEvent[] = [];
    for await (const event of videos.events(queued.id)) events.push(event);
    expect(events).toEqual([{ type: "video", video: expect.objectContaining({ status: "cancelled" }) }]);
    await videos.cancel(running.id);

    const bad = await failure(videos.create({ ...small, size: "65x65" }));
    expect(bad).toMatchObject({ status: 400, code: "invalid_value", param: "size" });
    expect((bad as Error).message).toMatch(/65x65/);
    const notReady = await failure(videos.content(queued.id));
    expect(notReady).toMatchObject({ status: 400, code: "video_not_ready" });
    const noModel = await failure(videos.create({ ...small, model: "nope" }));
    expect(noModel).toMatchObject({ status: 404, code: "model_not_found" });
    const badLimit = await failure(videos.list({ limit: 0 }));
    expect(badLimit).toMatchObject({ status: 400, param: "limit" });
    // An id the client passes as it is: the server answers it, the URL is not bent.
    const odd = await failure(videos.get("../../v2/models"));
    expect(odd).toMatchObject({ status: 404, code: "video_not_found" });
    const missing = await failure(
      videos.events("video_00000000000000000000000000000000")[Symbol.asyncIterator]().next(),
    );
    expect(missing).toMatchObject({ status: 404, code: "video_not_found" });
  });

  it("rejects CANCELED when the events' signal aborts, and UNAVAILABLE when no server answers", async () => {
    const videos = createVideosClient({ baseUrl: api.base });
    const video = await videos.create({ ...small, steps: 30 });
    const stop = new AbortController();
    const seen: VideoEvent[] = [];
    const following = (async () => {
      for await (const event of videos.events(video.id, { signal: stop.signal })) {
        seen.push(event);
        stop.abort();
      }
    })();
    const aborted = await failure(following);
    expect(aborted).toBeInstanceOf(ConnectError);
    expect((aborted as ConnectError).code).toBe(Code.Canceled);
    expect(seen.length).toBe(1);
    await videos.cancel(video.id);

    const nobody = createVideosClient({ baseUrl: "http://127.0.0.1:1" });
    const refused = await failure(nobody.get(video.id));
    expect((refused as ConnectError).code).toBe(Code.Unavailable);
    const events = await failure(
      nobody.events(video.id, { maxReconnects: 1, reconnectDelayMs: 1 })[Symbol.asyncIterator]().next(),
    );
    expect((events as ConnectError).code).toBe(Code.Unavailable);
  });

  it("sends the API key", async () => {
    const keyed = await startVideosServer({ apiKeys: ["alice-0123456789abcdef"] });
    try {
      const anonymous = await failure(createVideosClient({ baseUrl: keyed.base }).list());
      expect(anonymous).toMatchObject({ status: 401, type: "authentication_error", code: "invalid_api_key" });
      const alice = createVideosClient({ baseUrl: keyed.base, apiKey: "alice-0123456789abcdef" });
      const video = await alice.create(small);
      expect((await alice.list()).data.map((v) => v.id)).toEqual([video.id]);
      await alice.cancel(video.id);
    } finally {
      await keyed.close();
    }
  });
});

describe("events across a server restart", () => {
  it("reconnects to the server started again and follows the job to completion", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-videos-client-"));
    const start = (port: number) => {
      const server = createServer({
        modelRepositories: [MODELS],
        http: { host: "127.0.0.1", port },
        grpc: false,
        metrics: false,
        jobs: { jobsDir: dir, ffmpeg: false, concurrency: 1 },
        log: createLogger({ write: () => {} }),
      });
      return server.listen().then(({ http }) => ({ server, port: http?.port as number }));
    };
    let first = await start(0);
    try {
      const videos = createVideosClient({ baseUrl: `http://127.0.0.1:${first.port}` });
      const video = await videos.create({ ...small, steps: 12 });
      const statuses: string[] = [];
      let restarted = false;
      for await (const event of videos.events(video.id, { reconnectDelayMs: 100, maxReconnects: 20 })) {
        if (event.type === "video") statuses.push(event.video.status);
        if (!restarted && event.type === "progress") {
          restarted = true;
          // A graceful stop queues the running job again; the stream ends without a final status.
          await first.server.close();
          first = await start(first.port);
        }
      }
      expect(restarted).toBe(true);
      expect(statuses.at(-1)).toBe("completed");
      expect((await videos.get(video.id)).status).toBe("completed");
    } finally {
      await first.server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
