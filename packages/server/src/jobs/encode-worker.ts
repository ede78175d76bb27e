// The encoder's worker thread: PNG and GIF encoding take milliseconds per frame, so they run
// here, off the main thread. One message in (`EncodeTask`), one out (`EncodeResult`).
import { parentPort } from "node:worker_threads";
import { encodeGif, encodePng, type Frames } from "./image-codecs.js";

/** What the worker is asked to encode. */
export interface EncodeTask {
  id: number;
  kind: "gif" | "png";
  frames: Frames;
  fps: number;
}

/** Its answer: the file's bytes, or why not. */
export type EncodeResult = { id: number; bytes: Uint8Array } | { id: number; error: string };

parentPort?.on("message", (task: EncodeTask) => {
  try {
    const bytes = task.kind === "gif" ? encodeGif(task.frames, task.fps) : encodePng(task.frames);
    // Copied, not transferred: a small Buffer shares Node's pool, which cannot be transferred.
    parentPort?.postMessage({ id: task.id, bytes } satisfies EncodeResult);
  } catch (error) {
    parentPort?.postMessage({ id: task.id, error: String(error) } satisfies EncodeResult);
  }
});
