// `GET /v1/videos/{id}/events`: Server-Sent Events of one job. `video` events carry the video
// object whenever its status, progress or queue position changes (read from the store, so a job
// run by another replica is followed too); `progress` and `preview` events come live from this
// server's runner. The stream ends after the final `video` event.
import type { Job } from "../../jobs/job.js";
import { FINAL_STATUSES } from "../../jobs/job.js";
import type { JobEvent } from "../../jobs/job-events.js";
import type { JobService } from "../../jobs/job-service.js";
import { videoObject } from "../../jobs/video-object.js";
import type { HttpAnswer, HttpRequest } from "../transport/http-exchange.js";
import { EventBuffer } from "./event-buffer.js";

/** Bytes one stream may have waiting for its client before it is dropped. */
export const MAX_STREAM_BUFFER = 256 * 1024;

/** How often a stream reads its job from the store, in ms. */
export const STREAM_POLL_MS = 1000;

/** How often an idle stream sends a comment, so proxies keep it open, in ms. */
export const STREAM_KEEPALIVE_MS = 15_000;

const SSE_HEADERS = {
  "Content-Type": "text/event-stream; charset=utf-8",
  "Cache-Control": "no-store",
  "X-Accel-Buffering": "no",
};

const event = (name: string, data: unknown) => Buffer.from(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);

/** Open streams, counted against `--videos-max-event-streams`, and how to end each. */
export class EventStreams {
  readonly #closers = new Set<() => void>();

  get open(): number {
    return this.#closers.size;
  }

  add(close: () => void): void {
    this.#closers.add(close);
  }

  delete(close: () => void): void {
    this.#closers.delete(close);
  }

  /** End every stream (the server is stopping). */
  closeAll(): void {
    for (const close of [...this.#closers]) close();
  }
}

/** The stream for `job` (the caller checked the stream limit); counted in `streams` while open. */
export function eventStream(
  jobs: JobService,
  first: Job,
  fps: number,
  request: HttpRequest,
  streams: EventStreams,
): HttpAnswer {
  const drop = new AbortController();
  const buffer = new EventBuffer(MAX_STREAM_BUFFER, () => drop.abort());
  let last = "";
  let timer: NodeJS.Timeout | undefined;
  let keepalive: NodeJS.Timeout | undefined;
  let unsubscribe: (() => void) | undefined;
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    streams.delete(close);
    clearTimeout(timer);
    clearInterval(keepalive);
    unsubscribe?.();
    buffer.end();
  };
  const show = async (job: Job | undefined) => {
    if (closed) return;
    if (!job) {
      close();
      return;
    }
    const position = job.status === "queued" ? await jobs.queuePosition(job) : undefined;
    const video = videoObject(job, fps, position);
    const key = `${video.status}:${video.progress}:${position}`;
    if (key !== last) {
      last = key;
      buffer.push(event("video", video));
    }
    if (FINAL_STATUSES.has(job.status)) close();
  };
  const poll = () => {
    timer = setTimeout(() => {
      jobs
        .get(first.client, first.id)
        .then(show)
        .catch(close)
        .finally(() => {
          if (!closed) poll();
        });
    }, STREAM_POLL_MS);
    timer.unref();
  };
  streams.add(close);
  unsubscribe = jobs.events.subscribe(first.id, (live: JobEvent) => {
    if (live.type === "final") {
      void jobs.get(first.client, first.id).then(show).catch(close);
      return;
    }
    buffer.push(event(live.type, { id: first.id, ...live, type: undefined }));
  });
  keepalive = setInterval(() => buffer.push(Buffer.from(": keep-alive\n\n")), STREAM_KEEPALIVE_MS);
  keepalive.unref();
  request.signal.addEventListener("abort", close, { once: true });
  drop.signal.addEventListener("abort", close, { once: true });
  void show(first).then(() => {
    if (!closed) poll();
  }, close);
  return { status: 200, headers: SSE_HEADERS, stream: buffer, drop: drop.signal };
}
