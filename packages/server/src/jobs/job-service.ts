// The jobs subsystem as the videos API uses it: the store, the runner, retention, webhooks and
// live events, started together and stopped together. It runs jobs through the core like any
// client; the core knows nothing of jobs.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { rm } from "node:fs/promises";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { InferenceError } from "../base/errors.js";
import type { Logger } from "../base/log.js";
import type { InferenceServer } from "../core/inference-server.js";
import { FINAL_STATUSES, type Job, type JobRequest, type JobTraceContext, type OutputVariant } from "./job.js";
import { JobEvents } from "./job-events.js";
import { JobRunner } from "./job-runner.js";
import { type CreateResult, type JobPage, JobStore } from "./job-store.js";
import { openPostgres } from "./postgres-driver.js";
import { openSqlite } from "./sqlite-driver.js";
import { createVideoEncoder, findFfmpeg } from "./video-encoder.js";
import { type VideoMapping, videoMapping } from "./video-mapping.js";
import { videoObject } from "./video-object.js";
import { createWebhookDeliverer, type WebhookDeliverer } from "./webhook-deliverer.js";
import { type WebhookOptions, webhookEvent } from "./webhooks.js";

/** Options of the jobs subsystem (`galley serve --videos-*`, docs/guides/videos-api.md). */
export interface JobsOptions {
  /** `--jobs-store`: a SQLite file path (default `<jobsDir>/jobs.sqlite`) or a `postgres://` URL. */
  store?: string;
  /** `--jobs-dir` (default `./galley-jobs`): outputs under `<jobsDir>/outputs/<id>/`. */
  jobsDir?: string;
  /** `--videos-concurrency` (default 2): jobs this server runs at once. */
  concurrency?: number;
  /** `--videos-max-queued` (default 1000): queued jobs past which a create is answered 429. */
  maxQueued?: number;
  /** `--videos-per-client` (default 0, no limit): one API key's jobs running at once. */
  perClient?: number;
  /** `--videos-lease-secs` (default 30): how long a running job's claim holds without renewal. */
  leaseSecs?: number;
  /** `--videos-max-attempts` (default 2): starts of a job before a crash fails it `interrupted`. */
  maxAttempts?: number;
  /** `--videos-retention-secs` (default 86 400): when a finished job's record and outputs are deleted. */
  retentionSecs?: number;
  /** `--videos-api-key-file` lines: the API keys accepted as `Authorization: Bearer <key>`; none: open. */
  apiKeys?: readonly string[];
  /** `--videos-webhook-secret` and friends: signed webhooks; without, a job's `webhook_url` is refused. */
  webhooks?: WebhookOptions;
  /** `--videos-allow-private-webhooks` (default false): webhooks may target private and loopback addresses. */
  allowPrivateWebhooks?: boolean;
  /** `--videos-max-event-streams` (default 1000): open event streams, past which one is answered 429. */
  maxEventStreams?: number;
  /** `--videos-ffmpeg`: the ffmpeg to encode MP4 with (default: `ffmpeg` on PATH; `false`: GIF). */
  ffmpeg?: string | false;
  /** `--videos-ui` (default false): serve the web page at `/videos` beside the API. */
  page?: boolean;
  /** How often the queue is polled for work other servers queued, in ms (default 1000). */
  pollMs?: number;
}

/** The jobs subsystem. */
export interface JobService {
  readonly events: JobEvents;
  readonly options: Required<Pick<JobsOptions, "maxEventStreams" | "retentionSecs" | "allowPrivateWebhooks">>;
  readonly webhooksOn: boolean;
  /** The video content type (`video/mp4` with ffmpeg, else `image/gif`). */
  readonly videoType: string;
  /** The client an `Authorization` header names: "" when keys are off, undefined when refused. */
  client(authorization: string | undefined): string | undefined;
  /** A model's videos API mapping. @throws InferenceError VIDEO_MODEL_NOT_FOUND */
  mapping(model: string): VideoMapping;
  create(
    client: string,
    request: JobRequest,
    idempotencyKey: string | undefined,
    digest: string,
    traceContext?: JobTraceContext,
  ): Promise<CreateResult>;
  /** The job, if it exists and is `client`'s. */
  get(client: string, id: string): Promise<Job | undefined>;
  list(client: string, limit: number, order: "asc" | "desc", after?: Job): Promise<JobPage>;
  queuePosition(job: Job): Promise<number>;
  /** Cancel a queued or running job (its outputs deleted), or delete a finished one. */
  cancel(job: Job): Promise<{ job: Job; deleted: boolean }>;
  /** The file of an output, if written. */
  outputPath(job: Job, variant: OutputVariant): string | undefined;
  /** Seconds a client should wait before trying again when the queue is full. */
  retryAfterSeconds(): number;
  close(): Promise<void>;
}

const digestOf = (text: string) => createHash("sha256").update(text).digest();

/** Open the store, recover jobs a stopped server left running, and start running jobs. */
export async function createJobService(core: InferenceServer, options: JobsOptions, log: Logger): Promise<JobService> {
  const jobsDir = resolve(options.jobsDir ?? "galley-jobs");
  const outputs = join(jobsDir, "outputs");
  const storeUrl = options.store ?? join(jobsDir, "jobs.sqlite");
  const postgres = /^postgres(ql)?:\/\//.test(storeUrl);
  // Ending a job with a webhook_url records its event in the same transaction (the outbox).
  const outbox = options.webhooks && {
    event(job: Job) {
      if (!job.webhookUrl) return undefined;
      let fps = 8;
      try {
        fps = videoMapping(core.modelConfig(job.model, ""))?.fps ?? fps;
      } catch {}
      return webhookEvent(job.webhookUrl, `video.${job.status}`, videoObject(job, fps));
    },
    maxPending: options.webhooks.maxPending ?? 10_000,
    log,
  };
  const store = new JobStore(postgres ? await openPostgres(storeUrl) : await openSqlite(storeUrl), outbox);
  await store.migrate();
  const maxAttempts = options.maxAttempts ?? 2;
  const leaseMs = (options.leaseSecs ?? 30) * 1000;
  const retentionSecs = options.retentionSecs ?? 86_400;
  const keys = (options.apiKeys ?? []).map(digestOf);
  const ffmpeg = options.ffmpeg === false ? undefined : (options.ffmpeg ?? findFfmpeg());
  const encoder = createVideoEncoder(ffmpeg);
  const events = new JobEvents();
  const owner = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`;
  let webhooks: WebhookDeliverer | undefined;
  /** A job ended here: its event, if any, is in the outbox already. */
  const notify = (job: Job) => {
    if (job.webhookUrl) webhooks?.wake();
  };
  const runner = new JobRunner({
    store,
    core,
    encoder,
    events,
    outputs,
    owner,
    concurrency: options.concurrency ?? 2,
    perClient: options.perClient ?? 0,
    leaseMs,
    finished: notify,
    log,
  });
  // The embedded store has one server: whatever it shows running was cut short by its last stop.
  if (!postgres) await store.expireLeases();
  const failure = (what: string) => (error: unknown) => log.error(`jobs: ${what} failed: ${String(error)}`);
  const recover = async () => {
    for (const job of await store.recover(Date.now(), maxAttempts)) {
      events.emit(job.id, { type: "final" });
      notify(job);
    }
  };
  const sweep = async () => {
    for (const id of await store.expire(Date.now())) await rm(join(outputs, id), { recursive: true, force: true });
  };
  await recover();
  await sweep();
  const pollMs = options.pollMs ?? 1000;
  if (options.webhooks) {
    const webhookOptions = { ...options.webhooks, allowPrivate: options.allowPrivateWebhooks ?? false };
    webhooks = createWebhookDeliverer(store, webhookOptions, owner, pollMs, log);
  }
  const timers = [
    setInterval(() => void runner.fill().catch(failure("claiming")), pollMs),
    setInterval(() => void store.renew(owner, Date.now() + leaseMs).catch(failure("renewing leases")), leaseMs / 3),
    setInterval(() => void recover().catch(failure("recovering")), leaseMs / 2),
    // Expired jobs go within a minute, or half their retention when that is shorter.
    setInterval(() => void sweep().catch(failure("retention")), Math.min(60_000, retentionSecs * 500)),
  ];
  for (const timer of timers) timer.unref();
  void runner.fill().catch(failure("claiming"));

  const maxQueued = options.maxQueued ?? 1000;
  return {
    events,
    options: {
      maxEventStreams: options.maxEventStreams ?? 1000,
      retentionSecs,
      allowPrivateWebhooks: options.allowPrivateWebhooks ?? false,
    },
    webhooksOn: webhooks !== undefined,
    videoType: encoder.format.contentType,
    client(authorization) {
      if (keys.length === 0) return "";
      const match = /^Bearer ([\x21-\x7e]{1,512})$/.exec(authorization ?? "");
      if (!match) return undefined;
      const given = digestOf(match[1] as string);
      // Every key is compared, each in constant time, so the time taken says nothing of which matched.
      let found = false;
      for (const key of keys) found = timingSafeEqual(given, key) || found;
      return found ? given.toString("hex").slice(0, 32) : undefined;
    },
    mapping(model) {
      let found: VideoMapping | undefined;
      try {
        found = videoMapping(core.modelConfig(model, ""));
      } catch (error) {
        // A broken mapping is the server's to fix: its text is the answer (500).
        if (!(error instanceof InferenceError) || error.id === "UNCLASSIFIED") throw error;
      }
      if (!found) throw new InferenceError("VIDEO_MODEL_NOT_FOUND", { model });
      return found;
    },
    async create(client, request, idempotencyKey, digest, traceContext) {
      const now = Date.now();
      const job = {
        ...request,
        id: `video_${randomBytes(16).toString("hex")}`,
        status: "queued" as const,
        progress: 0,
        createdAt: Math.floor(now / 1000),
        expiresAt: Math.floor(now / 1000) + retentionSecs,
        client,
        requestDigest: digest,
        attempts: 0,
        outputs: {},
        ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
        ...(traceContext ? { traceContext } : {}),
      };
      const result = await store.create(job, maxQueued);
      if (result.kind === "created") void runner.fill().catch(failure("claiming"));
      return result;
    },
    async get(client, id) {
      const job = await store.get(id);
      return job && job.client === client ? job : undefined;
    },
    list: (client, limit, order, after) => store.list(client, limit, order, after),
    queuePosition: (job) => store.queuePosition(job),
    async cancel(job) {
      if (FINAL_STATUSES.has(job.status)) {
        await store.delete(job.id);
        await rm(join(outputs, job.id), { recursive: true, force: true });
        return { job, deleted: true };
      }
      const cancelled = await store.finish(job.id, "cancelled", { now: Date.now() });
      if (!cancelled) {
        // It finished meanwhile: answer what it is now.
        return { job: (await store.get(job.id)) ?? job, deleted: false };
      }
      runner.abort(job.id);
      await rm(join(outputs, job.id), { recursive: true, force: true });
      events.emit(job.id, { type: "final" });
      notify(cancelled);
      return { job: { ...cancelled, outputs: {} }, deleted: false };
    },
    outputPath(job, variant) {
      const file = job.outputs[variant];
      return file === undefined ? undefined : join(outputs, job.id, file);
    },
    retryAfterSeconds() {
      return Math.max(1, Math.ceil(runner.averageSeconds || 10));
    },
    async close() {
      for (const timer of timers) clearInterval(timer);
      await runner.stop();
      await webhooks?.close();
      await encoder.close();
      await store.close();
    },
  };
}
