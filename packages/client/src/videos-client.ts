// A client of the videos API (`galley serve --videos-api`, docs/guides/videos-api.md): asynchronous
// video jobs over HTTP. Replies with an error status reject with VideosApiError (the API's own
// error body); failures to reach the server reject with the REST client's ConnectErrors.
import { callSignals } from "./request-parts.js";
import { restErrorFrom } from "./rest-error.js";
import { followEvents, type VideoEventsOptions } from "./video-events.js";
import type {
  CreateVideoRequest,
  Video,
  VideoContentVariant,
  VideoDeleted,
  VideoEvent,
  VideoList,
} from "./video-types.js";
import { VideosApiError, videosApiError } from "./videos-error.js";

/** Options for {@link createVideosClient}. */
export interface VideosClientOptions {
  /** The server's HTTP origin, e.g. `http://localhost:8000`. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>` (servers started with `--videos-api-key-file`). */
  apiKey?: string;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

/** What every call takes. */
export interface VideoCallOptions {
  /** Abort the call: it rejects with a CANCELED ConnectError. */
  signal?: AbortSignal;
  /** A deadline in ms (a `content` body must have arrived by then too): DEADLINE_EXCEEDED. */
  timeoutMs?: number;
}

/** Options of {@link VideosClient.create}. */
export interface CreateVideoOptions extends VideoCallOptions {
  /** `Idempotency-Key`: creating again with it answers the first video (1 to 255 printable ASCII characters). */
  idempotencyKey?: string;
}

/** Options of {@link VideosClient.list}. */
export interface ListVideosOptions extends VideoCallOptions {
  /** 1 to 100 (default 20). */
  limit?: number;
  /** A video id: the page starts after it (the previous page's `last_id`). */
  after?: string;
  /** By creation time; default `desc`, newest first. */
  order?: "asc" | "desc";
}

/** Options of {@link VideosClient.content}. */
export interface VideoContentOptions extends VideoCallOptions {
  /** Default `video`. */
  variant?: VideoContentVariant;
}

/** A file of a video, as the server sends it. Read it once: with `bytes()` or `stream()`. */
export interface VideoContent {
  /** `video/mp4` or `image/gif` for the video, `image/png` for a thumbnail or preview. */
  contentType: string;
  /** Its length in bytes, when the server said. */
  size: number | undefined;
  /** The whole file. */
  bytes(): Promise<Uint8Array>;
  /** The file as it arrives. */
  stream(): AsyncIterable<Uint8Array>;
}

/** The videos API's calls, one per route. */
export interface VideosClient {
  /** `POST /v1/videos`: queue a video; the answer is the queued video. */
  create(request: CreateVideoRequest, options?: CreateVideoOptions): Promise<Video>;
  /** `GET /v1/videos/{id}`. */
  get(id: string, options?: VideoCallOptions): Promise<Video>;
  /** `GET /v1/videos`: one page of the caller's videos. */
  list(options?: ListVideosOptions): Promise<VideoList>;
  /** `GET /v1/videos/{id}/content`: the video (once completed), its thumbnail or its latest preview. */
  content(id: string, options?: VideoContentOptions): Promise<VideoContent>;
  /**
   * `DELETE /v1/videos/{id}`: a queued or running video is cancelled (the answer is the video, now
   * `cancelled`); a finished one is deleted (the answer is {@link VideoDeleted}).
   */
  cancel(id: string, options?: VideoCallOptions): Promise<Video | VideoDeleted>;
  /**
   * `GET /v1/videos/{id}/events`: the video's events until its final status (then the iteration
   * ends). A dropped connection is opened again (see {@link VideoEventsOptions}); breaking out of
   * the loop or aborting `signal` closes it.
   */
  events(id: string, options?: VideoEventsOptions): AsyncIterable<VideoEvent>;
}

/** A client of the videos API at `options.baseUrl`. */
export function createVideosClient(options: VideosClientOptions): VideosClient {
  const base = options.baseUrl.replace(/\/+$/, "");
  const headers: Record<string, string> = { ...options.headers };
  if (options.apiKey !== undefined) headers.authorization = `Bearer ${options.apiKey}`;
  const path = (id: string) => `/v1/videos/${encodeURIComponent(id)}`;

  /** One call: the reply, once its status says success; every failure as the documented error. */
  const send = async (
    method: string,
    target: string,
    call: VideoCallOptions,
    read: (response: Response) => Promise<unknown>,
    init: { body?: string; headers?: Record<string, string> } = {},
  ): Promise<unknown> => {
    const url = base + target;
    const { signal, deadline } = callSignals(call);
    try {
      const response = await fetch(url, {
        method,
        headers: { ...headers, ...init.headers },
        ...(init.body !== undefined ? { body: init.body } : {}),
        ...(signal ? { signal } : {}),
      });
      if (!response.ok) throw await videosApiError(response);
      return await read(response);
    } catch (error) {
      if (error instanceof VideosApiError) throw error;
      throw restErrorFrom(error, { method, url, deadline, timeoutMs: call.timeoutMs });
    }
  };
  const json = (response: Response) => response.json();

  return {
    create: async (request, call = {}) =>
      (await send("POST", "/v1/videos", call, json, {
        body: JSON.stringify(request),
        headers: {
          "content-type": "application/json",
          ...(call.idempotencyKey !== undefined ? { "idempotency-key": call.idempotencyKey } : {}),
        },
      })) as Video,
    get: async (id, call = {}) => (await send("GET", path(id), call, json)) as Video,
    list: async (call = {}) => {
      const query = new URLSearchParams();
      if (call.limit !== undefined) query.set("limit", String(call.limit));
      if (call.after !== undefined) query.set("after", call.after);
      if (call.order !== undefined) query.set("order", call.order);
      const q = query.size > 0 ? `?${query}` : "";
      return (await send("GET", `/v1/videos${q}`, call, json)) as VideoList;
    },
    cancel: async (id, call = {}) => (await send("DELETE", path(id), call, json)) as Video | VideoDeleted,
    content: async (id, call = {}) => {
      const variant = call.variant ?? "video";
      const target = `${path(id)}/content${variant === "video" ? "" : `?variant=${encodeURIComponent(variant)}`}`;
      const fail = (error: unknown) => restErrorFrom(error, { method: "GET", url: base + target });
      return (await send("GET", target, call, async (response) => {
        const length = response.headers.get("content-length");
        const body = response.body;
        let taken = false;
        const take = () => {
          if (taken) throw new TypeError("a video's content can be read once");
          taken = true;
        };
        return {
          contentType: response.headers.get("content-type") ?? "application/octet-stream",
          size: length === null ? undefined : Number(length),
          async bytes() {
            take();
            try {
              return new Uint8Array(await response.arrayBuffer());
            } catch (error) {
              throw fail(error);
            }
          },
          async *stream() {
            take();
            if (!body) return;
            try {
              for await (const chunk of body) yield chunk;
            } catch (error) {
              throw fail(error);
            }
          },
        } satisfies VideoContent;
      })) as VideoContent;
    },
    events: (id, call = {}) => followEvents(`${base}${path(id)}/events`, headers, call),
  };
}
