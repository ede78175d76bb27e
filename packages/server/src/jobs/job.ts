// A video job as the store keeps it and the API shows it.

/** Where a job is: OpenAI's video statuses, and `cancelled` for one deleted before it finished. */
export type JobStatus = "queued" | "in_progress" | "completed" | "failed" | "cancelled";

/** Statuses a job never leaves. */
export const FINAL_STATUSES: ReadonlySet<JobStatus> = new Set(["completed", "failed", "cancelled"]);

/** A priority class: the queue serves `high` before `normal` before `low`. */
export type PriorityClass = "high" | "normal" | "low";

/** Each class's rank in the queue (lower first). */
export const PRIORITY_RANK: Readonly<Record<PriorityClass, number>> = { high: 0, normal: 1, low: 2 };

/** What a client asked for, as validated against the model's declared limits. */
export interface JobRequest {
  model: string;
  prompt: string;
  /** `WxH` of the output, or "" for the model's default. */
  size: string;
  /** Frames to make, or 0 for the model's default. */
  frames: number;
  /** Denoising steps, or 0 for the model's default. */
  steps: number;
  /** The seed, or undefined for the model's default. */
  seed?: number;
  priority: PriorityClass;
  /** Where to POST the job's final state, if anywhere (http or https). */
  webhookUrl?: string;
}

/** A job record. Times are Unix seconds, as in OpenAI's video object. */
export interface Job extends JobRequest {
  id: string;
  status: JobStatus;
  /** 0 to 100. */
  progress: number;
  createdAt: number;
  startedAt?: number;
  completedAt?: number;
  /** When the record and its outputs are deleted. */
  expiresAt: number;
  /** Who submitted it: a digest of its API key, or "" without keys. */
  client: string;
  /** The `Idempotency-Key` it was created with, if any. */
  idempotencyKey?: string;
  /** A digest of the request body, to tell a retried create from a different one under the same key. */
  requestDigest: string;
  error?: { code: string; message: string };
  /** How many times it has been started (a run cut short by a crash counts). */
  attempts: number;
  /** Output files written, by variant (`video`, `thumbnail`, `preview`): file name under the job's folder. */
  outputs: Partial<Record<OutputVariant, string>>;
  /** The order jobs were created in (ties broken by it, cursors and queue positions read it). */
  seq: number;
  /** The caller's W3C trace context at create: each run of the job is a trace under it. */
  traceContext?: JobTraceContext;
}

/** A W3C trace context (`traceparent`, `tracestate` as the create request's headers gave them). */
export interface JobTraceContext {
  traceparent: string;
  tracestate?: string;
}

/** A downloadable output of a job. */
export type OutputVariant = "video" | "thumbnail" | "preview";
