// The videos API's error answers as one typed error.
import type { VideoApiErrorBody } from "./video-types.js";

/**
 * An error answer of the videos API: its HTTP `status` and the fields of its
 * `{"error": {message, type, param, code}}` body. A reply that is not that shape (a proxy's page)
 * has `type` `http_error`, `code` `http_<status>` and its text, cut at 1000 characters, as message.
 */
export class VideosApiError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** `invalid_request_error`, `authentication_error`, `rate_limit_error`, `server_error` (or `http_error`). */
  readonly type: string;
  /** The request field it is about, if one. */
  readonly param: string | null;
  /** E.g. `invalid_value`, `video_not_found`, `queue_full`. */
  readonly code: string;
  /** The reply's headers (`Retry-After` on a 429). */
  readonly headers: Headers;

  /** The error of a reply with `status`, its `body` and `headers`. */
  constructor(status: number, body: VideoApiErrorBody["error"], headers: Headers) {
    super(body.message);
    this.name = "VideosApiError";
    this.status = status;
    this.type = body.type;
    this.param = body.param;
    this.code = body.code;
    this.headers = headers;
  }
}

/** The error of a reply with an error status. */
export async function videosApiError(response: Response): Promise<VideosApiError> {
  const text = await response.text().catch(() => "");
  try {
    const error = (JSON.parse(text) as Partial<VideoApiErrorBody>).error;
    if (error && typeof error.message === "string" && typeof error.code === "string") {
      return new VideosApiError(
        response.status,
        { message: error.message, type: String(error.type), param: error.param ?? null, code: error.code },
        response.headers,
      );
    }
  } catch {
    // Not the API's JSON: the text itself.
  }
  const message = (text.length > 1000 ? `${text.slice(0, 1000)}...` : text) || `HTTP ${response.status}`;
  return new VideosApiError(
    response.status,
    { message, type: "http_error", param: null, code: `http_${response.status}` },
    response.headers,
  );
}
