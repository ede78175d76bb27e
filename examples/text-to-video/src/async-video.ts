// galley-video --async: a video as a job of the server's videos API (`galley serve --videos-api`):
// submitted (or, with --resume, an earlier one found again), followed through its events with the
// progress bar, and downloaded as the server encoded it (MP4 or GIF). Ctrl-C cancels the job on
// the server, unless --detach: then the job keeps running and can be resumed.
import { createWriteStream, mkdirSync } from "node:fs";
import { dirname, extname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  type CreateVideoRequest,
  createVideosClient,
  type Video,
  type VideoPriority,
  VideosApiError,
  type VideosClient,
} from "@galley/client";
import type { CliIo } from "./cli.js";
import { LocalError } from "./local-error.js";
import { createProgress } from "./progress.js";

/** The environment variable an API key is read from when --api-key is not given. */
export const API_KEY_ENV = "GALLEY_VIDEOS_API_KEY";

/** What --async was asked. */
export interface AsyncRequest {
  /** The server's HTTP origin. */
  baseUrl: string;
  apiKey?: string | undefined;
  /** Submit this prompt, or follow the video `resume`. */
  prompt?: string | undefined;
  resume?: string | undefined;
  /** `WIDTHxHEIGHT`. */
  size?: string | undefined;
  frames?: number | undefined;
  steps?: number | undefined;
  seed?: number | undefined;
  priority?: VideoPriority | undefined;
  /** Where to write the video; default `video.mp4` or `video.gif`, as the server serves it. */
  out?: string | undefined;
  previewDir?: string | undefined;
  /** Ctrl-C leaves the job running. */
  detach: boolean;
}

/** How long cancelling on Ctrl-C may take before galley-video gives up on it, in ms. */
const CANCEL_TIMEOUT_MS = 10_000;

/** `--priority`: a class name, or the gRPC path's levels 1 (high), 2 (normal), 3 (low). */
export function priorityClass(text: string): VideoPriority | undefined {
  const names: Record<string, VideoPriority> = { "1": "high", "2": "normal", "3": "low" };
  if (text === "high" || text === "normal" || text === "low") return text;
  return names[text];
}

/** Run one --async video; the exit code. */
export async function runAsync(request: AsyncRequest, io: CliIo): Promise<number> {
  const url = request.baseUrl;
  const videos = createVideosClient({
    baseUrl: url,
    ...(request.apiKey !== undefined ? { apiKey: request.apiKey } : {}),
  });
  let id: string | undefined;
  try {
    const signal = io.signal ? { signal: io.signal } : {};
    let video: Video;
    if (request.resume !== undefined) {
      video = await videos.get(request.resume, signal);
    } else {
      const body: CreateVideoRequest = { model: "text_to_video", prompt: request.prompt ?? "" };
      if (request.size !== undefined) body.size = request.size;
      if (request.frames !== undefined) body.frames = request.frames;
      if (request.steps !== undefined) body.steps = request.steps;
      if (request.seed !== undefined) body.seed = request.seed;
      if (request.priority !== undefined) body.priority = request.priority;
      video = await videos.create(body, signal);
    }
    id = video.id;
    io.stdout.write(
      `${request.resume !== undefined ? "following" : "submitted"} ${id} (${video.status}; ${url}/v1/videos/${id})\n`,
    );
    if (request.detach)
      io.stdout.write(`Ctrl-C leaves it running; come back with: galley-video --async --resume ${id}\n`);
    const final = await follow(videos, video, request, io);
    if (final.status === "completed") {
      await download(videos, id, request.out, io);
      return 0;
    }
    if (final.status === "failed") {
      io.stderr.write(`galley-video: the video failed on the server: ${final.error?.message} (${final.error?.code})\n`);
      return 1;
    }
    io.stderr.write(`galley-video: ${id} was cancelled on the server\n`);
    return 1;
  } catch (error) {
    if (io.signal?.aborted) return stop(videos, id, request.detach, io);
    if (error instanceof LocalError) {
      io.stderr.write(`galley-video: ${error.message}\n`);
      return error.exitCode;
    }
    io.stderr.write(`galley-video: ${explainApi(error, url)}\n`);
    return 1;
  }
}

/** Follow the events to the final status, drawing the progress (and writing previews). */
async function follow(videos: VideosClient, first: Video, request: AsyncRequest, io: CliIo): Promise<Video> {
  if (first.status === "completed" || first.status === "failed" || first.status === "cancelled") return first;
  const progress = createProgress(io.stdout);
  const show = (stage: string, step: number) => progress.update({ stage, step, total: 100, until: 100 });
  let last = first;
  try {
    for await (const event of videos.events(first.id, io.signal ? { signal: io.signal } : {})) {
      if (event.type === "video") {
        last = event.video;
        const queued = last.status === "queued";
        show(queued ? `queued #${(last.queue_position ?? 0) + 1}` : "running", last.progress);
      } else {
        show("running", event.progress);
        if (event.type === "preview" && request.previewDir !== undefined) {
          await savePreview(videos, first.id, request.previewDir, event.progress);
        }
      }
    }
  } finally {
    progress.done();
  }
  return last;
}

async function savePreview(videos: VideosClient, id: string, dir: string, progress: number): Promise<void> {
  const file = join(dir, `preview-${String(progress).padStart(3, "0")}.png`);
  const preview = await videos.content(id, { variant: "preview" });
  await write(preview.stream(), file);
}

async function write(body: AsyncIterable<Uint8Array>, file: string): Promise<void> {
  try {
    mkdirSync(dirname(file), { recursive: true });
    await pipeline(Readable.from(body), createWriteStream(file));
  } catch (error) {
    if (error instanceof ConnectError) throw error;
    throw new LocalError(`cannot write ${file}: ${(error as Error).message}`, 1);
  }
}

/** Download the video as the server encoded it: `out`'s extension follows the content type. */
async function download(videos: VideosClient, id: string, out: string | undefined, io: CliIo): Promise<void> {
  const content = await videos.content(id);
  const extension = content.contentType === "video/mp4" ? ".mp4" : ".gif";
  let file = out ?? `video${extension}`;
  if (extname(file).toLowerCase() !== extension) {
    const renamed = file.slice(0, file.length - extname(file).length) + extension;
    io.stderr.write(`galley-video: the server serves ${content.contentType}: writing ${renamed}, not ${file}\n`);
    file = renamed;
  }
  await write(content.stream(), file);
  io.stdout.write(`wrote ${file} (${content.contentType})\n`);
}

/** Ctrl-C: cancel the job on the server (or, with --detach, leave it running). */
async function stop(videos: VideosClient, id: string | undefined, detach: boolean, io: CliIo): Promise<number> {
  if (id === undefined) {
    io.stderr.write("\ngalley-video: cancelled before the server took the video\n");
    return 130;
  }
  if (detach) {
    io.stderr.write(`\ngalley-video: ${id} keeps running on the server; galley-video --async --resume ${id}\n`);
    return 130;
  }
  try {
    await videos.cancel(id, { timeoutMs: CANCEL_TIMEOUT_MS });
    io.stderr.write(`\ngalley-video: cancelled; the server stopped ${id}\n`);
  } catch (error) {
    io.stderr.write(`\ngalley-video: cancelling ${id} on the server failed: ${explainApi(error, "the server")}\n`);
  }
  return 130;
}

/** One line for a failed videos API call. */
export function explainApi(error: unknown, url: string): string {
  if (error instanceof VideosApiError) {
    const text = error.param ? `${error.message} (${error.param})` : error.message;
    if (error.status === 401)
      return `the server at ${url} needs an API key (--api-key, or ${API_KEY_ENV}): ${error.message}`;
    if (error.code === "model_not_found") return `the server at ${url} has no text-to-video pipeline: ${text}`;
    if (error.status === 404 && !error.code.startsWith("video_"))
      return `the server at ${url} does not serve the videos API (start it with --videos-api=true): ${text}`;
    if (error.status === 429) {
      const after = error.headers.get("retry-after");
      return `the server is too busy to take the video now${after ? `, try again in ${after}s` : ""}: ${text}`;
    }
    if (error.status < 500) return `the server rejected the request: ${text}`;
    return `the server failed: ${text}`;
  }
  const connect = ConnectError.from(error);
  if (connect.code === Code.Unavailable)
    return `cannot reach a server at ${url} (${connect.rawMessage}); start one with\n  npx galley serve --model-repository examples/text-to-video/models --videos-api=true`;
  return connect.rawMessage;
}
