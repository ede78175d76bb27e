// Writes a job's outputs: the video as MP4 through `ffmpeg` (a child process) when one is on PATH,
// else as an animated GIF; thumbnails and previews as PNG. Encoding never runs on the main thread.
import { spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { writeFile } from "node:fs/promises";
import { delimiter, join } from "node:path";
import { Worker } from "node:worker_threads";
import { workerEntry } from "../base/worker-entry.js";
import type { EncodeResult, EncodeTask } from "./encode-worker.js";
import type { Frames } from "./image-codecs.js";

export type { Frames };

/** The longest one ffmpeg run may take before it is killed. */
export const FFMPEG_TIMEOUT_MS = 120_000;

/** The encoder's worker thread's file. */
const ENCODE_WORKER_URL = workerEntry("./encode-worker.js", import.meta.url);

/** `ffmpeg` on PATH, or undefined. */
export function findFfmpeg(path = process.env.PATH ?? ""): string | undefined {
  for (const dir of path.split(delimiter).filter((d) => d !== "")) {
    const candidate = join(dir, "ffmpeg");
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  return undefined;
}

/** Encodes a job's outputs into files. */
export interface VideoEncoder {
  /** The video's file extension and content type: `mp4` with ffmpeg, else `gif`. */
  readonly format: { extension: "mp4" | "gif"; contentType: string };
  /** Write `frames` as the video at `path`. */
  video(frames: Frames, fps: number, path: string): Promise<void>;
  /** Write the first frame as a PNG at `path`. */
  still(frames: Frames, path: string): Promise<void>;
  close(): Promise<void>;
}

/** An encoder over `ffmpeg` (a path, or none for GIFs). One worker thread, started on first use. */
export function createVideoEncoder(ffmpeg: string | undefined): VideoEncoder {
  let worker: Worker | undefined;
  let next = 0;
  const pending = new Map<number, { resolve: (bytes: Uint8Array) => void; reject: (error: Error) => void }>();
  const encode = (kind: EncodeTask["kind"], frames: Frames, fps: number): Promise<Uint8Array> => {
    if (!worker) {
      worker = new Worker(ENCODE_WORKER_URL);
      worker.unref();
      worker.on("message", (result: EncodeResult) => {
        const waiter = pending.get(result.id);
        pending.delete(result.id);
        if ("error" in result) waiter?.reject(new Error(result.error));
        else waiter?.resolve(result.bytes);
      });
      worker.on("error", (error) => {
        for (const waiter of pending.values()) waiter.reject(error);
        pending.clear();
        worker = undefined;
      });
    }
    const id = next++;
    const task: EncodeTask = { id, kind, frames, fps };
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      worker?.postMessage(task);
    });
  };
  return {
    format: ffmpeg ? { extension: "mp4", contentType: "video/mp4" } : { extension: "gif", contentType: "image/gif" },
    async video(frames, fps, path) {
      if (ffmpeg) return runFfmpeg(ffmpeg, frames, fps, path);
      await writeFile(path, await encode("gif", frames, fps));
    },
    async still(frames, path) {
      await writeFile(path, await encode("png", frames, 0));
    },
    async close() {
      await worker?.terminate();
      worker = undefined;
    },
  };
}

/** H.264 in MP4 (yuv420p, even dimensions, `faststart` for playback while downloading). */
function runFfmpeg(ffmpeg: string, frames: Frames, fps: number, path: string): Promise<void> {
  const args = [
    ...["-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24"],
    ...["-s", `${frames.width}x${frames.height}`, "-r", String(fps), "-i", "pipe:0"],
    ...["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-c:v", "libx264", "-pix_fmt", "yuv420p"],
    ...["-movflags", "+faststart", "-f", "mp4", path],
  ];
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpeg, args, { stdio: ["pipe", "ignore", "pipe"], timeout: FFMPEG_TIMEOUT_MS });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (text: string) => {
      if (stderr.length < 4096) stderr += text;
    });
    child.on("error", reject);
    child.stdin.on("error", () => undefined);
    child.on("close", (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`ffmpeg failed (${signal ?? `exit ${code}`}): ${stderr.trim()}`));
    });
    child.stdin.end(frames.rgb);
  });
}
