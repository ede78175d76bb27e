// The videos API on the HTTP port (OpenAI's Videos API shape, docs/guides/videos-api.md): routes
// over the jobs subsystem. Every failure is answered in OpenAI's error JSON (video-errors.ts).
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { InferenceError } from "../../base/errors.js";
import type { Logger } from "../../base/log.js";
import type { InferenceServer } from "../../core/inference-server.js";
import type { Job, OutputVariant } from "../../jobs/job.js";
import type { JobService } from "../../jobs/job-service.js";
import { videoObject } from "../../jobs/video-object.js";
import type { HttpAnswer, HttpRequest } from "../transport/http-exchange.js";
import { OPENAPI_PATH, openApiDocument } from "./openapi.js";
import { invalid, videoFailure } from "./video-errors.js";
import { EventStreams, eventStream } from "./video-events.js";
import {
  createRequest,
  idempotencyKey,
  MAX_CREATE_BODY,
  parseCreateBody,
  requestDigest,
  traceContextOf,
} from "./video-request.js";
import { createVideosPage } from "./videos-page.js";

/** The most videos one list page holds. */
export const MAX_LIST_LIMIT = 100;

/** The videos API as a handler beside the KServe routes. */
export interface VideosFrontend {
  /** Whether a request target is the videos API's. */
  owns(target: string): boolean;
  handle(request: HttpRequest): Promise<HttpAnswer>;
  /** End the open event streams (the server is stopping). */
  close(): void;
}

const ID = /^video_[0-9a-f]{32}$/;
const CONTENT_TYPES: Record<OutputVariant, string> = { video: "", thumbnail: "image/png", preview: "image/png" };

/** The videos frontend over a started job service; with `page`, the web page at /videos too. */
export function createVideosFrontend(
  core: InferenceServer,
  jobs: JobService,
  log: Logger,
  options: { page?: boolean } = {},
): VideosFrontend {
  const streams = new EventStreams();
  const page = options.page ? createVideosPage() : undefined;
  const fpsOf = (model: string) => {
    try {
      return jobs.mapping(model).fps;
    } catch {
      return 8;
    }
  };
  const answer = (status: number, value: unknown, headers: Record<string, string> = {}): HttpAnswer => ({
    status,
    headers: { "Content-Type": "application/json", ...headers },
    parts: [Buffer.from(JSON.stringify(value))],
  });
  const show = async (job: Job) =>
    videoObject(job, fpsOf(job.model), job.status === "queued" ? await jobs.queuePosition(job) : undefined);

  const route = async (request: HttpRequest, path: string, query: URLSearchParams): Promise<HttpAnswer> => {
    if (page?.owns(path)) return page.serve(request.method, path);
    if (path === OPENAPI_PATH) {
      if (request.method !== "GET") throw new InferenceError("METHOD_NOT_ALLOWED");
      return answer(200, openApiDocument());
    }
    const client = jobs.client(request.header("authorization"));
    if (client === undefined) throw new InferenceError("VIDEO_API_KEY");
    const parts = path.split("/").slice(3);
    if (parts.length === 0) {
      if (request.method === "POST") return create(request, client);
      if (request.method === "GET") return list(client, query);
      throw new InferenceError("METHOD_NOT_ALLOWED");
    }
    const [id = "", action, ...rest] = parts;
    if (rest.length > 0 || (action !== undefined && action !== "content" && action !== "events")) {
      throw new InferenceError("NOT_FOUND_ROUTE");
    }
    const allowed = action === undefined ? ["GET", "DELETE"] : ["GET"];
    if (!allowed.includes(request.method)) throw new InferenceError("METHOD_NOT_ALLOWED");
    const job = ID.test(id) ? await jobs.get(client, id) : undefined;
    if (!job) throw new InferenceError("VIDEO_NOT_FOUND", { id });
    if (action === "content") return content(job, query);
    if (action === "events") {
      if (streams.open >= jobs.options.maxEventStreams) {
        throw new InferenceError("VIDEO_TOO_MANY_STREAMS", { max: jobs.options.maxEventStreams });
      }
      return eventStream(jobs, job, fpsOf(job.model), request, streams);
    }
    if (request.method === "DELETE") {
      const done = await jobs.cancel(job);
      return done.deleted
        ? answer(200, { id: job.id, object: "video.deleted", deleted: true })
        : answer(200, await show(done.job));
    }
    return answer(200, await show(job));
  };

  const create = async (request: HttpRequest, client: string): Promise<HttpAnswer> => {
    if (!core.accepting) throw new InferenceError("SERVER_NOT_READY");
    const key = idempotencyKey(request.header("idempotency-key"));
    const type = request.header("content-type") ?? "";
    if (!/^application\/json\b/i.test(type))
      throw invalid("body", "send the request as JSON (Content-Type: application/json)");
    const body = await request.body({ limit: MAX_CREATE_BODY, encoding: "identity" });
    const fields = parseCreateBody(body.bytes);
    const mapping = jobs.mapping(fields.model as string);
    const job = createRequest(fields, mapping, {
      on: jobs.webhooksOn,
      allowPrivate: jobs.options.allowPrivateWebhooks,
    });
    const trace = traceContextOf(request.header("traceparent"), request.header("tracestate"));
    const result = await jobs.create(client, job, key, requestDigest(job), trace);
    switch (result.kind) {
      case "queue-full":
        throw new InferenceError("VIDEO_QUEUE_FULL", { queued: result.queued });
      case "key-reused":
        throw new InferenceError("VIDEO_IDEMPOTENCY_CONFLICT", { key: key ?? "", id: result.job.id });
      case "existing":
        return answer(200, await show(result.job), { "Idempotent-Replayed": "true" });
      case "created":
        return answer(200, await show(result.job));
    }
  };

  const list = async (client: string, query: URLSearchParams): Promise<HttpAnswer> => {
    const limitText = query.get("limit");
    const limit = limitText === null ? 20 : Number(limitText);
    if (!/^[0-9]{1,3}$/.test(limitText ?? "20") || limit < 1 || limit > MAX_LIST_LIMIT) {
      throw invalid("limit", `'limit' must be a whole number from 1 to ${MAX_LIST_LIMIT}`);
    }
    const order = query.get("order") ?? "desc";
    if (order !== "asc" && order !== "desc") throw invalid("order", "'order' must be asc or desc");
    const afterId = query.get("after");
    let after: Job | undefined;
    if (afterId !== null) {
      after = ID.test(afterId) ? await jobs.get(client, afterId) : undefined;
      if (!after) throw invalid("after", `'after' names no video of yours: '${afterId.slice(0, 64)}'`);
    }
    const page = await jobs.list(client, limit, order, after);
    const data = await Promise.all(page.jobs.map(show));
    return answer(200, {
      object: "list",
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: page.hasMore,
    });
  };

  const content = async (job: Job, query: URLSearchParams): Promise<HttpAnswer> => {
    const variant = query.get("variant") ?? "video";
    if (variant !== "video" && variant !== "thumbnail" && variant !== "preview") {
      throw invalid("variant", "'variant' must be video, thumbnail or preview");
    }
    const path = jobs.outputPath(job, variant);
    const size =
      path === undefined
        ? undefined
        : await stat(path).then(
            (s) => s.size,
            () => undefined,
          );
    if (path === undefined || size === undefined) {
      throw new InferenceError("VIDEO_NOT_READY", { id: job.id, status: job.status, variant });
    }
    const type = variant === "video" ? (path.endsWith(".mp4") ? "video/mp4" : "image/gif") : CONTENT_TYPES[variant];
    return {
      status: 200,
      headers: { "Content-Type": type, "Cache-Control": variant === "preview" ? "no-store" : "private, max-age=3600" },
      stream: createReadStream(path, { highWaterMark: 256 * 1024 }),
    };
  };

  return {
    close: () => streams.closeAll(),
    owns: (target) =>
      target === "/v1/videos" ||
      target.startsWith("/v1/videos/") ||
      target.startsWith("/v1/videos?") ||
      target.split("?")[0] === OPENAPI_PATH ||
      page?.owns(target.split("?")[0] as string) === true,
    async handle(request) {
      const at = request.target.indexOf("?");
      const path = at === -1 ? request.target : request.target.slice(0, at);
      const query = new URLSearchParams(at === -1 ? "" : request.target.slice(at + 1));
      try {
        return await route(request, path, query);
      } catch (error) {
        const retry = error instanceof InferenceError && error.id === "VIDEO_QUEUE_FULL";
        return videoFailure(
          error,
          log,
          `HTTP ${request.method} ${path}`,
          retry ? { "Retry-After": String(jobs.retryAfterSeconds()) } : {},
        );
      }
    },
  };
}
