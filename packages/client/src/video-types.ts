// The videos API's shapes (docs/guides/videos-api.md), as the server's OpenAPI document
// (`GET /v1/openapi.json`) declares them; test/videos-openapi.test.ts compares them with it.

/** A video job's state: `queued`, `in_progress`, then one of the final three. */
export type VideoStatus = "queued" | "in_progress" | "completed" | "failed" | "cancelled";

/** A job's class in the queue: `high` is served first, then `normal`, then `low`. */
export type VideoPriority = "high" | "normal" | "low";

/** A video job: OpenAI's video object, with Galley's `cancelled`, `queue_position`, `frames`, `steps`, `prompt` and `priority`. */
export interface Video {
  /** `video_` and 32 hexadecimal digits. */
  id: string;
  object: "video";
  model: string;
  status: VideoStatus;
  /** 0 to 100 (100 once completed). */
  progress: number;
  /** Jobs served before this one; only while it is queued. */
  queue_position?: number;
  /** Unix seconds. */
  created_at: number;
  /** Unix seconds; null until the job ends. */
  completed_at: number | null;
  /** Unix seconds: when the record and its files are deleted. */
  expires_at: number;
  /** `WIDTHxHEIGHT`. */
  size: string;
  /** The length at the model's frame rate, as a decimal string. */
  seconds: string;
  frames: number;
  steps: number;
  prompt: string;
  priority: VideoPriority;
  /** Why a job failed (`code` e.g. `interrupted`); null otherwise. */
  error: { code: string; message: string } | null;
}

/** The body of `POST /v1/videos`. Give `seconds` or `frames`, not both. */
export interface CreateVideoRequest {
  /** A loaded model that declares `videos_api.*` parameters (the example's `text_to_video`). */
  model: string;
  prompt: string;
  /** `WIDTHxHEIGHT`, one of the model's sizes (default: its default size). */
  size?: string;
  /** The length: frames = seconds x the model's fps. */
  seconds?: string | number;
  /** The frame count, 1 to the model's maximum. */
  frames?: number;
  /** Denoising steps, 1 to the model's maximum. */
  steps?: number;
  /** 0 to 2147483647. */
  seed?: number;
  /** Default `normal`. */
  priority?: VideoPriority;
  /** Where the server POSTs the final state, signed per Standard Webhooks (needs a secret on the server). */
  webhook_url?: string;
}

/** One page of `GET /v1/videos`. */
export interface VideoList {
  object: "list";
  data: Video[];
  /** The first video's id on this page; null for an empty page. */
  first_id: string | null;
  /** The last video's id: pass it as `after` for the next page. */
  last_id: string | null;
  has_more: boolean;
}

/** The answer to deleting a finished video. */
export interface VideoDeleted {
  id: string;
  object: "video.deleted";
  deleted: true;
}

/** Which file of a video `content` fetches: the video, its first frame, or the latest preview (PNG). */
export type VideoContentVariant = "video" | "thumbnail" | "preview";

/** The body of the API's error answers. */
export interface VideoApiErrorBody {
  error: {
    message: string;
    /** `invalid_request_error`, `authentication_error`, `rate_limit_error` or `server_error`. */
    type: string;
    /** The request field the error is about, if one. */
    param: string | null;
    /** E.g. `invalid_value`, `video_not_found`, `queue_full` (docs/guides/videos-api.md lists them). */
    code: string;
  };
}

/**
 * One server-sent event of `GET /v1/videos/{id}/events`: `video` carries the whole video whenever
 * its status, progress or queue position changes (the last one has a final status); `progress`
 * and `preview` come live from the server that runs the job (`url` is the path of the latest
 * preview PNG, relative to the server).
 */
export type VideoEvent =
  | { type: "video"; video: Video }
  | { type: "progress"; id: string; progress: number }
  | { type: "preview"; id: string; progress: number; url: string };
