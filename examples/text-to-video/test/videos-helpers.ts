// Helpers for the videos API tests: a server over models/ with the API on, JSON calls, waiting
// for a video's status by polling it (each poll an event: an answer), and reading event streams.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createLogger, createServer, type GalleyServer, type JobsOptions } from "@galley/server";

export const MODELS = fileURLToPath(new URL("../models", import.meta.url));

export interface VideosServer {
  server: GalleyServer;
  base: string;
  dir: string;
  close(): Promise<void>;
}

/** A server over models/ with the videos API on, its jobs in a fresh temporary folder. */
export async function startVideosServer(jobs: JobsOptions = {}): Promise<VideosServer> {
  const dir = mkdtempSync(join(tmpdir(), "galley-videos-"));
  const server = createServer({
    modelRepositories: [MODELS],
    http: { host: "127.0.0.1", port: 0 },
    grpc: false,
    metrics: false,
    // GIFs unless a test asks for ffmpeg.
    jobs: { jobsDir: dir, ffmpeg: false, ...jobs },
    log: createLogger({ write: () => {} }),
  });
  const { http } = await server.listen();
  return {
    server,
    base: `http://127.0.0.1:${http?.port}`,
    dir,
    async close() {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface Answer {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: JSON as the test reads it
  body: any;
}

/** A JSON request; the answer parsed. */
export async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? headers : { "content-type": "application/json", ...headers },
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text === "" ? undefined : JSON.parse(text) };
}

/** Poll a video until `done` says so (at most `limitMs`); every poll's answer is checked by `each`. */
export async function waitFor(
  base: string,
  id: string,
  // biome-ignore lint/suspicious/noExplicitAny: the video object
  done: (video: any) => boolean,
  options: { headers?: Record<string, string>; limitMs?: number; each?: (video: unknown) => void } = {},
  // biome-ignore lint/suspicious/noExplicitAny: the video object
): Promise<any> {
  const end = Date.now() + (options.limitMs ?? 60_000);
  for (;;) {
    const { status, body } = await call(base, "GET", `/v1/videos/${id}`, undefined, options.headers);
    if (status !== 200) throw new Error(`GET /v1/videos/${id}: ${status} ${JSON.stringify(body)}`);
    options.each?.(body);
    if (done(body)) return body;
    if (["completed", "failed", "cancelled"].includes(body.status)) {
      throw new Error(`video ${id} ended ${body.status}: ${JSON.stringify(body.error)}`);
    }
    if (Date.now() > end) throw new Error(`video ${id} still ${body.status} (${body.progress}%)`);
    // Not a sleep that synchronises anything: the next poll asks again.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export interface SseEvent {
  event: string;
  // biome-ignore lint/suspicious/noExplicitAny: JSON as the test reads it
  data: any;
}

/** Read an event stream to its end (or until `stop` says so), parsed. */
export async function readEvents(url: string, stop?: (event: SseEvent) => boolean): Promise<SseEvent[]> {
  const controller = new AbortController();
  const res = await fetch(url, { signal: controller.signal });
  if (res.status !== 200) throw new Error(`events: ${res.status} ${await res.text()}`);
  const events: SseEvent[] = [];
  const decoder = new TextDecoder();
  let text = "";
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    for (let at = text.indexOf("\n\n"); at >= 0; at = text.indexOf("\n\n")) {
      const block = text.slice(0, at);
      text = text.slice(at + 2);
      if (block.startsWith(":")) continue;
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? "message";
      const data = JSON.parse(/^data: (.*)$/m.exec(block)?.[1] ?? "null");
      events.push({ event, data });
      if (stop?.({ event, data })) {
        controller.abort();
        return events;
      }
    }
  }
  return events;
}
