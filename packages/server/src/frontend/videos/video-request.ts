// `POST /v1/videos`: the JSON body checked against the model's declared limits, field by field,
// each failure a 400 naming its field.
import { createHash } from "node:crypto";
import type { JobRequest, JobTraceContext, PriorityClass } from "../../jobs/job.js";
import type { VideoMapping } from "../../jobs/video-mapping.js";
import { webhookUrlProblem } from "../../jobs/webhook-target.js";
import { invalid } from "./video-errors.js";

/** The largest create body accepted (the prompt is bounded far below it by each model). */
export const MAX_CREATE_BODY = 64 * 1024;

/** The longest `Idempotency-Key`. */
export const MAX_IDEMPOTENCY_KEY = 255;

const FIELDS = new Set(["model", "prompt", "size", "seconds", "frames", "steps", "seed", "priority", "webhook_url"]);
const PRIORITIES: ReadonlySet<string> = new Set(["high", "normal", "low"]);

/** The body as an object. @throws 400 when it is not a JSON object. */
export function parseCreateBody(bytes: Uint8Array): Record<string, unknown> {
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"));
  } catch (error) {
    throw invalid("body", `the body is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalid("body", "the body must be a JSON object");
  }
  const record = body as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!FIELDS.has(key)) throw invalid(key.slice(0, 64), `unknown field '${key.slice(0, 64)}'`);
  }
  if (typeof record.model !== "string" || record.model === "") throw invalid("model", "'model' is required (a string)");
  return record;
}

const wholeIn = (param: string, value: unknown, min: number, max: number): number => {
  const n = typeof value === "string" && /^[0-9]{1,10}$/.test(value) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < min || n > max) {
    throw invalid(param, `'${param}' must be a whole number from ${min} to ${max}`);
  }
  return n;
};

/** The job a checked body asks for. */
export function createRequest(
  body: Record<string, unknown>,
  mapping: VideoMapping,
  webhooks: { on: boolean; allowPrivate: boolean },
): JobRequest {
  const model = body.model as string;
  const { prompt } = body;
  if (typeof prompt !== "string" || prompt.trim() === "")
    throw invalid("prompt", "'prompt' is required (a non-empty string)");
  const promptBytes = Buffer.byteLength(prompt, "utf8");
  if (promptBytes > mapping.maxPromptBytes) {
    throw invalid(
      "prompt",
      `'prompt' is ${promptBytes} bytes long; model '${model}' takes at most ${mapping.maxPromptBytes}`,
    );
  }
  let size = "";
  if (body.size !== undefined) {
    if (typeof body.size !== "string" || !/^[1-9][0-9]{0,5}x[1-9][0-9]{0,5}$/.test(body.size)) {
      throw invalid("size", "'size' must be WIDTHxHEIGHT, e.g. 128x128");
    }
    if (mapping.sizes.length > 0 ? !mapping.sizes.includes(body.size) : body.size !== mapping.defaultSize) {
      const allowed = mapping.sizes.length > 0 ? mapping.sizes : [mapping.defaultSize];
      throw invalid(
        "size",
        `size '${body.size}' is not supported by model '${model}'; use one of ${allowed.join(", ")}`,
      );
    }
    size = body.size;
  }
  if (body.seconds !== undefined && body.frames !== undefined) {
    throw invalid("seconds", "give 'seconds' or 'frames', not both");
  }
  let frames = 0;
  if (body.frames !== undefined) frames = wholeIn("frames", body.frames, 1, mapping.maxFrames);
  if (body.seconds !== undefined) {
    const seconds = typeof body.seconds === "string" ? Number(body.seconds) : body.seconds;
    const maxSeconds = mapping.maxFrames / mapping.fps;
    if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds <= 0 || seconds > maxSeconds) {
      throw invalid("seconds", `'seconds' must be more than 0 and at most ${maxSeconds} for model '${model}'`);
    }
    frames = Math.max(1, Math.min(mapping.maxFrames, Math.round(seconds * mapping.fps)));
  }
  const request: JobRequest = {
    model,
    prompt,
    size,
    frames: frames || mapping.defaultFrames,
    steps: body.steps === undefined ? mapping.defaultSteps : wholeIn("steps", body.steps, 1, mapping.maxSteps),
    priority: "normal",
  };
  if (body.seed !== undefined) request.seed = wholeIn("seed", body.seed, 0, 2 ** 31 - 1);
  if (body.priority !== undefined) {
    if (typeof body.priority !== "string" || !PRIORITIES.has(body.priority)) {
      throw invalid("priority", "'priority' must be high, normal or low");
    }
    request.priority = body.priority as PriorityClass;
  }
  if (body.webhook_url !== undefined) {
    if (!webhooks.on)
      throw invalid("webhook_url", "webhooks are not configured on this server (--videos-webhook-secret)");
    if (typeof body.webhook_url !== "string") throw invalid("webhook_url", "'webhook_url' must be a string");
    const problem = webhookUrlProblem(body.webhook_url, webhooks.allowPrivate);
    if (problem) throw invalid("webhook_url", `'webhook_url' ${problem}`);
    request.webhookUrl = body.webhook_url;
  }
  return request;
}

/** The `Idempotency-Key` header, checked: 1 to 255 printable ASCII characters. */
export function idempotencyKey(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  if (header.length < 1 || header.length > MAX_IDEMPOTENCY_KEY || !/^[\x21-\x7e]+$/.test(header)) {
    throw invalid(
      "Idempotency-Key",
      `the Idempotency-Key header must be 1 to ${MAX_IDEMPOTENCY_KEY} printable ASCII characters`,
    );
  }
  return header;
}

/** W3C Trace Context's limit on `tracestate` (32 members of at most 256 characters: 512 is what a receiver must keep). */
const MAX_TRACESTATE = 512;

/**
 * The caller's trace context to keep with a job: a well-formed `traceparent` (version, trace and
 * parent ids, flags; ids not all zero) and a `tracestate` of printable ASCII up to 512 characters,
 * else nothing (a malformed context is ignored, as W3C Trace Context says: never an error).
 */
export function traceContextOf(
  traceparent: string | undefined,
  tracestate: string | undefined,
): JobTraceContext | undefined {
  const parent = traceparent?.trim().toLowerCase();
  const ids = parent === undefined ? null : /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(parent);
  if (!ids || ids[1] === "ff" || /^0+$/.test(ids[2] as string) || /^0+$/.test(ids[3] as string)) return undefined;
  const state = tracestate?.trim();
  const keep = state && state.length <= MAX_TRACESTATE && /^[\x20-\x7e]+$/.test(state) ? state : undefined;
  return { traceparent: parent as string, ...(keep ? { tracestate: keep } : {}) };
}

/** A digest of what a request asks for (to tell a retried create from another under one key). */
export function requestDigest(request: JobRequest): string {
  const fields = [
    request.model,
    request.prompt,
    request.size,
    request.frames,
    request.steps,
    request.seed ?? "",
    request.priority,
    request.webhookUrl ?? "",
  ];
  return createHash("sha256").update(JSON.stringify(fields)).digest("hex");
}
