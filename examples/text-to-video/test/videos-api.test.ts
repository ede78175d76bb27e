// The videos API (`galley serve --videos-api`) over the real CPU pipeline (models/, 64x64, a few
// steps): create, poll, events, content, list, cancel (the denoising loop stops: the denoiser's
// statistics), idempotency, priorities, a full queue, API keys, and hostile input.
import { GifReader } from "omggif";
import { PNG } from "pngjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, readEvents, startVideosServer, type VideosServer, waitFor } from "./videos-helpers.js";

let api: VideosServer;

beforeAll(async () => {
  api = await startVideosServer({ concurrency: 1 });
});

afterAll(async () => {
  await api?.close();
});

const small = { model: "text_to_video", prompt: "a red fox running in snow", size: "64x64", frames: 3, steps: 2 };

async function denoiserCount(): Promise<number> {
  const { body } = await call(api.base, "GET", "/v2/models/denoiser/stats");
  return Number(body.model_stats[0].inference_stats.success.count);
}

describe("a video from create to content", () => {
  it("runs, reports progress, and serves the video, its thumbnail and its last preview", async () => {
    const created = await call(api.base, "POST", "/v1/videos", small);
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ object: "video", model: "text_to_video", status: "queued", progress: 0 });
    expect(created.body.id).toMatch(/^video_[0-9a-f]{32}$/);
    const statuses = new Set<string>();
    const video = await waitFor(api.base, created.body.id, (v) => v.status === "completed", {
      each: (v) => statuses.add((v as { status: string }).status),
    });
    expect(video).toMatchObject({
      status: "completed",
      progress: 100,
      size: "64x64",
      frames: 3,
      steps: 2,
      error: null,
    });
    expect(video.completed_at).toBeGreaterThanOrEqual(video.created_at);
    expect(video.expires_at).toBe(video.created_at + 86_400);
    expect(video.queue_position).toBeUndefined();
    const content = await fetch(`${api.base}/v1/videos/${video.id}/content`);
    expect(content.status).toBe(200);
    expect(content.headers.get("content-type")).toBe("image/gif");
    // Decoded by libraries independent of the encoders: 3 frames of 64x64; stills as PNG.
    const gif = new GifReader(new Uint8Array(await content.arrayBuffer()));
    expect([gif.numFrames(), gif.width, gif.height]).toEqual([3, 64, 64]);
    for (const [variant, side] of [
      ["thumbnail", 64],
      ["preview", 16],
    ] as const) {
      const image = await fetch(`${api.base}/v1/videos/${video.id}/content?variant=${variant}`);
      expect(image.status).toBe(200);
      expect(image.headers.get("content-type")).toBe("image/png");
      const png = PNG.sync.read(Buffer.from(await image.arrayBuffer()));
      expect([png.width, png.height]).toEqual([side, side]);
    }
    const list = await call(api.base, "GET", "/v1/videos?limit=100");
    expect(list.body.object).toBe("list");
    expect(list.body.data.map((v: { id: string }) => v.id)).toContain(video.id);
  });

  it("streams queue position, progress, a preview and the final status as server-sent events", async () => {
    const created = await call(api.base, "POST", "/v1/videos", { ...small, steps: 6 });
    const events = await readEvents(`${api.base}/v1/videos/${created.body.id}/events`);
    const videos = events.filter((e) => e.event === "video").map((e) => e.data);
    expect(videos[0]).toMatchObject({ id: created.body.id, object: "video" });
    expect(videos.at(-1)).toMatchObject({ status: "completed", progress: 100 });
    const previews = events.filter((e) => e.event === "preview");
    expect(previews.length).toBeGreaterThan(0);
    expect(previews[0]?.data.url).toBe(`/v1/videos/${created.body.id}/content?variant=preview`);
    const progress = events.filter((e) => e.event === "progress" || e.event === "preview").map((e) => e.data.progress);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
    // A finished video's stream is its final state alone.
    const again = await readEvents(`${api.base}/v1/videos/${created.body.id}/events`);
    expect(again.map((e) => [e.event, e.data.status])).toEqual([["video", "completed"]]);
  });

  it("pages through the list with limit, after and order", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push((await call(api.base, "POST", "/v1/videos", { ...small, prompt: `page ${i}` })).body.id);
    const first = await call(api.base, "GET", "/v1/videos?limit=2");
    expect(first.body.data.map((v: { id: string }) => v.id)).toEqual([ids[2], ids[1]]);
    expect(first.body.has_more).toBe(true);
    const next = await call(api.base, "GET", `/v1/videos?limit=1&after=${first.body.last_id}`);
    expect(next.body.data.map((v: { id: string }) => v.id)).toEqual([ids[0]]);
    const ascending = await call(api.base, "GET", `/v1/videos?order=asc&after=${ids[0]}`);
    expect(ascending.body.data.map((v: { id: string }) => v.id)).toEqual([ids[1], ids[2]]);
    for (const id of ids) await waitFor(api.base, id, (v) => v.status === "completed");
  });
});

describe("cancelling", () => {
  it("stops a running job's denoising loop at its next step and deletes its outputs", async () => {
    const long = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "a long one", steps: 1000 });
    await waitFor(api.base, long.body.id, (v) => v.status === "in_progress" && v.progress > 0);
    const cancelled = await call(api.base, "DELETE", `/v1/videos/${long.body.id}`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ id: long.body.id, status: "cancelled" });
    const afterCancel = await denoiserCount();
    // A 3-step video now: had the cancelled loop gone on, its steps would be counted here too
    // (one step in flight when the cancel came may still finish).
    const short = await call(api.base, "POST", "/v1/videos", { ...small, steps: 3 });
    await waitFor(api.base, short.body.id, (v) => v.status === "completed");
    const added = (await denoiserCount()) - afterCancel;
    expect(added).toBeGreaterThanOrEqual(3);
    expect(added).toBeLessThanOrEqual(4);
    const after = await call(api.base, "GET", `/v1/videos/${long.body.id}`);
    expect(after.body).toMatchObject({ status: "cancelled" });
    expect((await call(api.base, "GET", `/v1/videos/${long.body.id}/content?variant=preview`)).status).toBe(400);
    // Deleting a finished video removes it.
    const deleted = await call(api.base, "DELETE", `/v1/videos/${short.body.id}`);
    expect(deleted.body).toEqual({ id: short.body.id, object: "video.deleted", deleted: true });
    expect((await call(api.base, "GET", `/v1/videos/${short.body.id}`)).status).toBe(404);
  });

  it("cancels a queued job, which then never runs, and serves high priority first", async () => {
    const blocker = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "blocker", steps: 1000 });
    await waitFor(api.base, blocker.body.id, (v) => v.status === "in_progress");
    const low = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "low", priority: "low" });
    const normal = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "normal" });
    const high = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "high", priority: "high" });
    expect(high.body.queue_position).toBe(0);
    expect((await call(api.base, "GET", `/v1/videos/${normal.body.id}`)).body.queue_position).toBe(1);
    expect((await call(api.base, "GET", `/v1/videos/${low.body.id}`)).body.queue_position).toBe(2);
    const gone = await call(api.base, "DELETE", `/v1/videos/${normal.body.id}`);
    expect(gone.body).toMatchObject({ status: "cancelled", progress: 0 });
    expect((await call(api.base, "GET", `/v1/videos/${low.body.id}`)).body.queue_position).toBe(1);
    await call(api.base, "DELETE", `/v1/videos/${blocker.body.id}`);
    const highDone = await waitFor(api.base, high.body.id, (v) => v.status === "completed");
    const lowDone = await waitFor(api.base, low.body.id, (v) => v.status === "completed");
    expect(highDone.completed_at).toBeLessThanOrEqual(lowDone.completed_at);
    expect((await call(api.base, "GET", `/v1/videos/${normal.body.id}`)).body).toMatchObject({ status: "cancelled" });
  });
});

describe("idempotency keys", () => {
  it("answers a repeated create with the first video, and refuses the key for another request", async () => {
    const key = { "idempotency-key": `key-${Date.now()}` };
    const first = await call(api.base, "POST", "/v1/videos", small, key);
    const again = await call(api.base, "POST", "/v1/videos", small, key);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    const other = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "another" }, key);
    expect(other.status).toBe(409);
    expect(other.body.error).toMatchObject({ code: "idempotency_key_reused", type: "invalid_request_error" });
    for (const bad of ["", "x".repeat(256), "has space", "tab\tkey", "é"]) {
      const refused = await call(api.base, "POST", "/v1/videos", small, { "idempotency-key": bad });
      expect(refused.status, JSON.stringify(bad)).toBe(400);
      expect(refused.body.error.param).toBe("Idempotency-Key");
    }
    await waitFor(api.base, first.body.id, (v) => v.status === "completed");
  });
});

describe("hostile input", () => {
  const refused = async (body: unknown, param: string | null, status = 400, code = "invalid_value") => {
    const answer = await call(api.base, "POST", "/v1/videos", body);
    expect(answer.status, JSON.stringify(body).slice(0, 200)).toBe(status);
    expect(answer.body.error).toMatchObject({ param, code });
    expect(typeof answer.body.error.message).toBe("string");
    expect(answer.body.error.message).not.toMatch(/TypeError|at .*\.js|undefined/);
  };

  it("refuses unknown models, sizes, frames, steps, seeds and prompts outside the model's limits", async () => {
    await refused({ ...small, model: "no_such_model" }, null, 404, "model_not_found");
    await refused({ ...small, model: "denoiser" }, null, 404, "model_not_found");
    await refused({ ...small, model: "x".repeat(10_000) }, null, 404, "model_not_found");
    await refused({ ...small, size: "65x65" }, "size");
    await refused({ ...small, size: "64x64x64" }, "size");
    await refused({ ...small, size: 64 }, "size");
    await refused({ ...small, frames: 33 }, "frames");
    await refused({ ...small, frames: 0 }, "frames");
    await refused({ ...small, frames: 1.5 }, "frames");
    await refused({ ...small, frames: undefined, seconds: "100" }, "seconds");
    await refused({ ...small, seconds: 1 }, "seconds");
    await refused({ ...small, steps: 1001 }, "steps");
    await refused({ ...small, steps: "2; DROP TABLE" }, "steps");
    await refused({ ...small, seed: -1 }, "seed");
    await refused({ ...small, seed: 2 ** 31 }, "seed");
    await refused({ ...small, prompt: "x".repeat(201) }, "prompt");
    await refused({ ...small, prompt: "é".repeat(101) }, "prompt");
    await refused({ ...small, prompt: "   " }, "prompt");
    await refused({ ...small, prompt: ["a"] }, "prompt");
    await refused({ ...small, priority: "urgent" }, "priority");
    await refused({ ...small, extra: 1 }, "extra");
  });

  it("refuses bodies that are not a JSON object, and webhooks on a server without a secret", async () => {
    await refused("{not json", "body");
    await refused("[1,2]", "body");
    await refused("null", "body");
    await refused({ prompt: "no model" }, "model");
    await refused({ ...small, webhook_url: "https://example.com/hook" }, "webhook_url");
    const big = await call(api.base, "POST", "/v1/videos", { ...small, prompt: "x".repeat(70_000) });
    expect(big.status).toBe(400);
    const form = await fetch(`${api.base}/v1/videos`, { method: "POST", body: "prompt=x" });
    expect(form.status).toBe(400);
  });

  it("answers unknown ids, variants, query values and methods with the API's errors", async () => {
    expect((await call(api.base, "GET", "/v1/videos/video_0000")).body.error.code).toBe("video_not_found");
    expect((await call(api.base, "GET", `/v1/videos/video_${"0".repeat(32)}`)).status).toBe(404);
    expect((await call(api.base, "GET", `/v1/videos/video_${"0".repeat(32)}/events`)).status).toBe(404);
    expect((await call(api.base, "GET", "/v1/videos?limit=0")).body.error.param).toBe("limit");
    expect((await call(api.base, "GET", "/v1/videos?limit=101")).body.error.param).toBe("limit");
    expect((await call(api.base, "GET", "/v1/videos?limit=abc")).body.error.param).toBe("limit");
    expect((await call(api.base, "GET", "/v1/videos?order=sideways")).body.error.param).toBe("order");
    expect((await call(api.base, "GET", "/v1/videos?after=video_nope")).body.error.param).toBe("after");
    expect((await call(api.base, "PUT", "/v1/videos")).status).toBe(405);
    expect((await call(api.base, "POST", `/v1/videos/video_${"0".repeat(32)}`)).status).toBe(405);
    expect((await call(api.base, "GET", `/v1/videos/video_${"0".repeat(32)}/other`)).status).toBe(404);
    const queued = await call(api.base, "POST", "/v1/videos", small);
    const early = await call(api.base, "GET", `/v1/videos/${queued.body.id}/content`);
    expect([400, 200]).toContain(early.status);
    if (early.status === 400) expect(early.body.error.code).toBe("video_not_ready");
    expect((await call(api.base, "GET", `/v1/videos/${queued.body.id}/content?variant=raw`)).body.error.param).toBe(
      "variant",
    );
    await waitFor(api.base, queued.body.id, (v) => v.status === "completed");
    // The KServe routes are still served beside the API.
    expect((await fetch(`${api.base}/v2/health/ready`)).status).toBe(200);
  });

  it("serves its OpenAPI document", async () => {
    const doc = await call(api.base, "GET", "/v1/openapi.json");
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe("3.1.0");
    expect(Object.keys(doc.body.paths)).toEqual([
      "/v1/videos",
      "/v1/videos/{video_id}",
      "/v1/videos/{video_id}/content",
      "/v1/videos/{video_id}/events",
    ]);
  });
});

describe("admission", () => {
  it("answers 429 with Retry-After when the queue is full, and keeps each API key's videos apart", async () => {
    const limited = await startVideosServer({
      concurrency: 1,
      maxQueued: 1,
      apiKeys: ["alice-0123456789abcdef", "bob-0123456789abcdef"],
    });
    try {
      const alice = { authorization: "Bearer alice-0123456789abcdef" };
      const bob = { authorization: "Bearer bob-0123456789abcdef" };
      const refusedHeaders: Record<string, string>[] = [
        {},
        { authorization: "Bearer wrong-0123456789abcdef" },
        { authorization: "Basic abc" },
      ];
      for (const headers of refusedHeaders) {
        const answer = await call(limited.base, "POST", "/v1/videos", small, headers);
        expect(answer.status).toBe(401);
        expect(answer.body.error.code).toBe("invalid_api_key");
      }
      const running = await call(limited.base, "POST", "/v1/videos", { ...small, steps: 1000 }, alice);
      await waitFor(limited.base, running.body.id, (v) => v.status === "in_progress", { headers: alice });
      const queued = await call(limited.base, "POST", "/v1/videos", small, bob);
      expect(queued.body.status).toBe("queued");
      const full = await call(limited.base, "POST", "/v1/videos", small, alice);
      expect(full.status).toBe(429);
      expect(full.body.error.code).toBe("queue_full");
      expect(Number(full.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      // Bob sees his own video only.
      expect((await call(limited.base, "GET", `/v1/videos/${running.body.id}`, undefined, bob)).status).toBe(404);
      expect((await call(limited.base, "DELETE", `/v1/videos/${running.body.id}`, undefined, bob)).status).toBe(404);
      const list = await call(limited.base, "GET", "/v1/videos", undefined, bob);
      expect(list.body.data.map((v: { id: string }) => v.id)).toEqual([queued.body.id]);
      await call(limited.base, "DELETE", `/v1/videos/${running.body.id}`, undefined, alice);
      await waitFor(limited.base, queued.body.id, (v) => v.status === "completed", { headers: bob });
    } finally {
      await limited.close();
    }
  });
});
