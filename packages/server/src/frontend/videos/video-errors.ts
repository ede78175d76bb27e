// The videos API's one error mapping: any failure as OpenAI's error JSON,
// `{"error":{"message","type","param","code"}}`, with the status the error table gives it.
import { answerableFailure, InferenceError } from "../../base/errors.js";
import type { Logger } from "../../base/log.js";
import { HTTP_STATUS } from "../http/http-status.js";
import type { HttpAnswer } from "../transport/http-exchange.js";
import { ClientGone } from "../transport/http-exchange.js";

/** The request field each invalid-value error is about. */
const PARAMS = new WeakMap<InferenceError, string>();

/** A 400 about one field (`param` in the answer). */
export function invalid(param: string, message: string): InferenceError {
  const error = new InferenceError("VIDEO_INVALID", { message });
  PARAMS.set(error, param);
  return error;
}

/** OpenAI's `code` for each of our errors (others: the id in lower case). */
const CODES: Partial<Record<string, string>> = {
  VIDEO_API_KEY: "invalid_api_key",
  VIDEO_INVALID: "invalid_value",
  VIDEO_NOT_FOUND: "video_not_found",
  VIDEO_MODEL_NOT_FOUND: "model_not_found",
  VIDEO_QUEUE_FULL: "queue_full",
  VIDEO_IDEMPOTENCY_CONFLICT: "idempotency_key_reused",
  VIDEO_NOT_READY: "video_not_ready",
  VIDEO_TOO_MANY_STREAMS: "too_many_event_streams",
};

/** The answer to a failure; a bug is logged and answered 500 without its JavaScript text. */
export function videoFailure(
  error: unknown,
  log: Logger,
  where: string,
  headers: Record<string, string> = {},
): HttpAnswer {
  if (error instanceof ClientGone) return { status: 400, headers: {}, parts: [] };
  const { failed, logged } = answerableFailure(error);
  if (logged !== undefined) log.error(`${where}: ${logged}`);
  const status = failed.httpStatusOverride ?? HTTP_STATUS[failed.code];
  const body = {
    error: {
      message: failed.message,
      type:
        status >= 500
          ? "server_error"
          : status === 401
            ? "authentication_error"
            : status === 429
              ? "rate_limit_error"
              : "invalid_request_error",
      param: PARAMS.get(failed) ?? null,
      code: CODES[failed.id] ?? failed.id.toLowerCase(),
    },
  };
  return {
    status,
    headers: { "Content-Type": "application/json", ...headers },
    parts: [Buffer.from(JSON.stringify(body))],
  };
}
