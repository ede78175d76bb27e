// A video's Server-Sent Events as an async iterable, opened again when the connection drops. The
// server numbers no events (no `id:` lines, so no `Last-Event-ID` to resume from): a new stream
// starts with the video's current state, so a reconnect loses only the progress and preview
// events sent while it was away, never a status.
import { Code, ConnectError } from "@connectrpc/connect";
import { restErrorFrom } from "./rest-error.js";
import type { Video, VideoEvent } from "./video-types.js";
import { VideosApiError, videosApiError } from "./videos-error.js";

/** Options of {@link VideosClient.events}. */
export interface VideoEventsOptions {
  /** Close the stream: the iteration rejects with a CANCELED ConnectError. */
  signal?: AbortSignal;
  /**
   * How many times in a row a dropped stream (a network failure, a stream that ends before the
   * final status, a 5xx answer) is opened again before the iteration rejects; default 5. The
   * count starts over after each event received.
   */
  maxReconnects?: number;
  /** The wait before the first reconnect, in ms, doubled for each further one up to 8 s; default 500. */
  reconnectDelayMs?: number;
}

const FINAL = new Set(["completed", "failed", "cancelled"]);
const MAX_DELAY_MS = 8000;
/** The longest event read: a stream that sends more without ending one is dropped. */
const MAX_EVENT_CHARS = 1 << 20;

/** One parsed block of an event stream, or undefined for a comment or an unknown event. */
function parseBlock(block: string): VideoEvent | undefined {
  let name = "message";
  const data: string[] = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return undefined;
  const payload = JSON.parse(data.join("\n")) as Record<string, unknown>;
  if (name === "video") return { type: "video", video: payload as unknown as Video };
  if (name === "progress") return { type: "progress", id: String(payload.id), progress: Number(payload.progress) };
  if (name === "preview") {
    return { type: "preview", id: String(payload.id), progress: Number(payload.progress), url: String(payload.url) };
  }
  return undefined;
}

/** Wait `ms`, or reject when `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", done);
      resolve();
    }, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** The events at `url` until the video's final status. */
export async function* followEvents(
  url: string,
  headers: Record<string, string>,
  options: VideoEventsOptions,
): AsyncGenerator<VideoEvent> {
  const maxReconnects = options.maxReconnects ?? 5;
  const firstDelay = options.reconnectDelayMs ?? 500;
  const decoder = new TextDecoder();
  let failures = 0;
  for (;;) {
    const closer = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, closer.signal]) : closer.signal;
    let dropped: unknown = new ConnectError(`GET ${url}: the answer had no body`, Code.Unavailable);
    try {
      const response = await fetch(url, { headers: { ...headers, accept: "text/event-stream" }, signal });
      if (!response.ok) {
        const error = await videosApiError(response);
        if (response.status < 500) throw error;
        dropped = error;
      } else if (response.body) {
        let text = "";
        for await (const chunk of response.body) {
          // CRLF as LF, over the whole text: a CR at a chunk's end waits for its LF.
          text = (text + decoder.decode(chunk, { stream: true })).replace(/\r\n/g, "\n");
          for (let at = text.indexOf("\n\n"); at >= 0; at = text.indexOf("\n\n")) {
            const event = parseBlock(text.slice(0, at));
            text = text.slice(at + 2);
            if (!event) continue;
            failures = 0;
            yield event;
            if (event.type === "video" && FINAL.has(event.video.status)) return;
          }
          if (text.length > MAX_EVENT_CHARS) {
            throw new ConnectError(
              `GET ${url}: an event longer than ${MAX_EVENT_CHARS} characters`,
              Code.ResourceExhausted,
            );
          }
        }
        dropped = new ConnectError(`GET ${url}: the stream ended before the video's final status`, Code.Unavailable);
      }
    } catch (error) {
      if (error instanceof VideosApiError) throw error;
      if (options.signal?.aborted) throw restErrorFrom(error, { method: "GET", url });
      dropped = error;
    } finally {
      // A loop left early (break, return, a throw) closes the connection.
      closer.abort();
    }
    if (failures >= maxReconnects) {
      throw dropped instanceof VideosApiError ? dropped : restErrorFrom(dropped, { method: "GET", url });
    }
    try {
      await pause(Math.min(firstDelay * 2 ** failures, MAX_DELAY_MS), options.signal);
    } catch (reason) {
      throw restErrorFrom(reason, { method: "GET", url });
    }
    failures++;
  }
}
