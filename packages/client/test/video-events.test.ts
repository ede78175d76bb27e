// videos.events against a hand-written event stream server on port 0 (the real videos API is
// tested in examples/text-to-video/test/videos-client.test.ts): CRLF lines split across chunks,
// streams that drop before the final status (opened again, up to maxReconnects), a broken event,
// an error answer, an event that never ends.
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createVideosClient, type VideoEvent, VideosApiError } from "../src/index.js";

const ID = `video_${"a".repeat(32)}`;
const video = (status: string, progress = 0) => JSON.stringify({ id: ID, object: "video", status, progress });

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** A server whose n-th (from 0) events request is answered by `answer`; its base URL and a request count. */
async function serve(answer: (res: ServerResponse, n: number, auth: string | undefined) => void) {
  let n = 0;
  const server = createServer((req, res) => answer(res, n++, req.headers.authorization));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, count: () => n };
}

const sse = (res: ServerResponse) => res.writeHead(200, { "content-type": "text/event-stream" });

async function collect(iterable: AsyncIterable<VideoEvent>): Promise<VideoEvent[]> {
  const out: VideoEvent[] = [];
  for await (const event of iterable) out.push(event);
  return out;
}

describe("videos.events", () => {
  it("reads CRLF lines split across chunks, skips comments and unknown events, ends at the final status", async () => {
    const { base } = await serve((res, _n, auth) => {
      expect(auth).toBe("Bearer k-0123456789abcdef");
      sse(res);
      res.write(`: keep-alive\r\n\r\nevent: video\r\ndata: ${video("queued")}\r`);
      setImmediate(() => {
        res.write(`\n\r\nevent: something-new\ndata: {}\n\nevent: progress\ndata: {"id":"${ID}","progress":40}\n\n`);
        res.write(`event: preview\ndata: {"id":"${ID}","progress":50,"url":"/p"}\n\n`);
        res.end(`event: video\ndata: ${video("completed", 100)}\n\nevent: video\ndata: ${video("queued")}\n\n`);
      });
    });
    const videos = createVideosClient({ baseUrl: base, apiKey: "k-0123456789abcdef" });
    const events = await collect(videos.events(ID));
    expect(events.map((e) => (e.type === "video" ? e.video.status : e.type))).toEqual([
      "queued",
      "progress",
      "preview",
      "completed",
    ]);
    expect(events[2]).toEqual({ type: "preview", id: ID, progress: 50, url: "/p" });
  });

  it("opens a dropped stream again, and gives up after maxReconnects drops in a row", async () => {
    const { base, count } = await serve((res, n) => {
      sse(res);
      res.end(`event: video\ndata: ${video(n < 3 ? "in_progress" : "completed", n * 10)}\n\n`);
    });
    const videos = createVideosClient({ baseUrl: base });
    const events = await collect(videos.events(ID, { reconnectDelayMs: 1, maxReconnects: 1 }));
    // Each stream's event resets the count: three drops, one at a time, are followed through.
    expect(events.length).toBe(4);
    expect(count()).toBe(4);

    const silent = await serve((res) => {
      sse(res);
      res.end(": nothing\n\n");
    });
    const failed = await collect(
      createVideosClient({ baseUrl: silent.base }).events(ID, { reconnectDelayMs: 1, maxReconnects: 2 }),
    ).then(
      () => expect.fail("resolved"),
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(ConnectError);
    expect((failed as ConnectError).code).toBe(Code.Unavailable);
    expect((failed as ConnectError).message).toMatch(/ended before the video's final status/);
    expect(silent.count()).toBe(3);
  });

  it("rejects an error answer at once with VideosApiError; a broken event or an endless one after the retries", async () => {
    const { base, count } = await serve((res) => {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          error: { message: "no such video", type: "invalid_request_error", param: null, code: "video_not_found" },
        }),
      );
    });
    const missing = await collect(createVideosClient({ baseUrl: base }).events(ID)).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(VideosApiError);
    expect(missing).toMatchObject({ status: 404, code: "video_not_found", message: "no such video" });
    expect(count()).toBe(1);

    const broken = await serve((res) => {
      sse(res);
      res.end("event: video\ndata: {not json\n\n");
    });
    const parse = await collect(
      createVideosClient({ baseUrl: broken.base }).events(ID, { reconnectDelayMs: 1, maxReconnects: 1 }),
    ).catch((e: unknown) => e);
    expect((parse as ConnectError).code).toBe(Code.Internal);
    expect(broken.count()).toBe(2);

    const endless = await serve((res) => {
      sse(res);
      res.end(`data: ${"x".repeat(1 << 21)}`);
    });
    const long = await collect(
      createVideosClient({ baseUrl: endless.base }).events(ID, { reconnectDelayMs: 1, maxReconnects: 0 }),
    ).catch((e: unknown) => e);
    expect((long as ConnectError).code).toBe(Code.ResourceExhausted);
  });
});
