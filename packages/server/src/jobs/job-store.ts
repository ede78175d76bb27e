// The durable job store: the same SQL for SQLite and PostgreSQL. A running job holds a lease that
// its runner renews; a job whose lease ran out (its server was killed) is queued again or failed
// (see `recover`), whichever replica notices first. Beside the jobs, the webhook outbox: the event
// of a job that ends is written in the transaction that ends it, and stays until it is delivered
// or has had its attempts (`claimWebhooks` leases events to one server at a time).
import type { Logger } from "../base/log.js";
import type { Job, JobStatus, OutputVariant, PriorityClass } from "./job.js";
import { PRIORITY_RANK } from "./job.js";
import type { Row, SqlDriver, SqlValue } from "./sql-driver.js";

const COLUMNS = `id TEXT NOT NULL UNIQUE, model TEXT NOT NULL, prompt TEXT NOT NULL, size TEXT NOT NULL,
  frames INTEGER NOT NULL, steps INTEGER NOT NULL, seed BIGINT, priority TEXT NOT NULL, rank INTEGER NOT NULL,
  webhook_url TEXT, status TEXT NOT NULL, progress INTEGER NOT NULL, created_at BIGINT NOT NULL,
  started_at BIGINT, completed_at BIGINT, expires_at BIGINT NOT NULL, client TEXT NOT NULL,
  idempotency_key TEXT, request_digest TEXT NOT NULL, error_code TEXT, error_message TEXT,
  attempts INTEGER NOT NULL, outputs TEXT NOT NULL, owner TEXT, lease_until BIGINT, trace_parent TEXT,
  trace_state TEXT`;

const SCHEMA = {
  sqlite: `CREATE TABLE IF NOT EXISTS galley_jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, ${COLUMNS})`,
  postgres: `CREATE TABLE IF NOT EXISTS galley_jobs (seq BIGSERIAL PRIMARY KEY, ${COLUMNS})`,
};
const OUTBOX_COLUMNS = `id TEXT NOT NULL UNIQUE, job_id TEXT NOT NULL, url TEXT NOT NULL, body TEXT NOT NULL,
  attempts INTEGER NOT NULL, next_at BIGINT NOT NULL, owner TEXT, lease_until BIGINT, created_at BIGINT NOT NULL`;
const OUTBOX = {
  sqlite: `CREATE TABLE IF NOT EXISTS galley_webhooks (seq INTEGER PRIMARY KEY AUTOINCREMENT, ${OUTBOX_COLUMNS})`,
  postgres: `CREATE TABLE IF NOT EXISTS galley_webhooks (seq BIGSERIAL PRIMARY KEY, ${OUTBOX_COLUMNS})`,
};
const INDEXES = [
  "CREATE INDEX IF NOT EXISTS galley_webhooks_due ON galley_webhooks (next_at, seq)",
  "CREATE UNIQUE INDEX IF NOT EXISTS galley_jobs_idempotency ON galley_jobs (client, idempotency_key)",
  "CREATE INDEX IF NOT EXISTS galley_jobs_queue ON galley_jobs (status, rank, seq)",
  "CREATE INDEX IF NOT EXISTS galley_jobs_expiry ON galley_jobs (expires_at)",
];

/** What {@link JobStore.create} did. */
export type CreateResult =
  | { kind: "created"; job: Job }
  | { kind: "existing"; job: Job }
  | { kind: "key-reused"; job: Job }
  | { kind: "queue-full"; queued: number };

/** A page of {@link JobStore.list}. */
export interface JobPage {
  jobs: Job[];
  hasMore: boolean;
}

/** A webhook event as recorded: its `webhook-id`, where it goes and the body every attempt sends. */
export interface WebhookEvent {
  id: string;
  url: string;
  body: string;
}

/** A recorded event waiting for delivery, as {@link JobStore.claimWebhooks} leases it. */
export interface PendingWebhook extends WebhookEvent {
  jobId: string;
  /** Attempts made, this one included (it counts from its claim). */
  attempts: number;
}

/** What the store records in the outbox when a job ends (`completed`, `failed`, `cancelled`). */
export interface OutboxOptions {
  /** The event of a job that has just ended, or undefined for none (no `webhook_url`). */
  event: (job: Job) => WebhookEvent | undefined;
  /** Events pending at most: past it a job ends without its event, logged. */
  maxPending: number;
  log: Logger;
}

/** A job store over one SQL database (see `openJobStore`). */
export class JobStore {
  readonly #db: SqlDriver;
  readonly #outbox: OutboxOptions | undefined;

  /** With `outbox`, ending a job records its webhook event in the same transaction. */
  constructor(db: SqlDriver, outbox?: OutboxOptions) {
    this.#db = db;
    this.#outbox = outbox;
  }

  /** Create the table and indexes if they are missing. */
  async migrate(): Promise<void> {
    if (this.#db.dialect === "postgres") {
      // Two replicas starting together would race on CREATE TABLE IF NOT EXISTS.
      await this.#db.transaction(async (q) => {
        await q("SELECT pg_advisory_xact_lock(53053053)");
        await q(SCHEMA.postgres);
        await q(OUTBOX.postgres);
        for (const index of INDEXES) await q(index);
      });
      return;
    }
    await this.#db.query(SCHEMA.sqlite);
    await this.#db.query(OUTBOX.sqlite);
    for (const index of INDEXES) await this.#db.query(index);
  }

  /**
   * Add a queued job, unless the client already created one with the same idempotency key (that
   * one is returned: `existing` for the same request, `key-reused` for a different one) or
   * `maxQueued` jobs are already queued.
   */
  async create(job: Omit<Job, "seq">, maxQueued: number): Promise<CreateResult> {
    return this.#db.transaction(async (q) => {
      if (this.#db.dialect === "postgres") await q("SELECT pg_advisory_xact_lock(53053054)");
      if (job.idempotencyKey !== undefined) {
        const [row] = await q("SELECT * FROM galley_jobs WHERE client = $1 AND idempotency_key = $2", [
          job.client,
          job.idempotencyKey,
        ]);
        if (row) {
          const found = toJob(row);
          return { kind: found.requestDigest === job.requestDigest ? "existing" : "key-reused", job: found };
        }
      }
      const [count] = await q("SELECT count(*) AS n FROM galley_jobs WHERE status = 'queued'");
      const queued = Number(count?.n ?? 0);
      if (queued >= maxQueued) return { kind: "queue-full", queued };
      const [row] = await q(
        `INSERT INTO galley_jobs (id, model, prompt, size, frames, steps, seed, priority, rank, webhook_url, status,
           progress, created_at, expires_at, client, idempotency_key, request_digest, attempts, outputs, trace_parent,
           trace_state)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'queued', 0, $11, $12, $13, $14, $15, 0, '{}', $16, $17)
         RETURNING *`,
        [
          job.id,
          job.model,
          job.prompt,
          job.size,
          job.frames,
          job.steps,
          job.seed ?? null,
          job.priority,
          PRIORITY_RANK[job.priority],
          job.webhookUrl ?? null,
          job.createdAt,
          job.expiresAt,
          job.client,
          job.idempotencyKey ?? null,
          job.requestDigest,
          job.traceContext?.traceparent ?? null,
          job.traceContext?.tracestate ?? null,
        ],
      );
      return { kind: "created", job: toJob(row as Row) };
    });
  }

  async get(id: string): Promise<Job | undefined> {
    const [row] = await this.#db.query("SELECT * FROM galley_jobs WHERE id = $1", [id]);
    return row ? toJob(row) : undefined;
  }

  /** Queued jobs served before `job` (0: it is next). */
  async queuePosition(job: Job): Promise<number> {
    const [row] = await this.#db.query(
      "SELECT count(*) AS n FROM galley_jobs WHERE status = 'queued' AND (rank < $1 OR (rank = $1 AND seq < $2))",
      [PRIORITY_RANK[job.priority], job.seq],
    );
    return Number(row?.n ?? 0);
  }

  /** A client's jobs, newest first (`desc`) or oldest first, after the job `after` if given. */
  async list(client: string, limit: number, order: "asc" | "desc", after?: Job): Promise<JobPage> {
    const params: SqlValue[] = [client, limit + 1];
    let where = "client = $1";
    if (after) {
      params.push(after.seq);
      where += order === "desc" ? " AND seq < $3" : " AND seq > $3";
    }
    const rows = await this.#db.query(
      `SELECT * FROM galley_jobs WHERE ${where} ORDER BY seq ${order === "desc" ? "DESC" : "ASC"} LIMIT $2`,
      params,
    );
    return { jobs: rows.slice(0, limit).map(toJob), hasMore: rows.length > limit };
  }

  /**
   * Claim the next queued job for `owner` (highest class first, then oldest), leased until
   * `leaseUntil` (ms), skipping clients that already run `perClient` jobs (0: no limit). With
   * PostgreSQL the row is locked `FOR UPDATE SKIP LOCKED`, so replicas never claim the same job.
   */
  async claim(owner: string, now: number, leaseUntil: number, perClient: number): Promise<Job | undefined> {
    const lock = this.#db.dialect === "postgres" ? "FOR UPDATE SKIP LOCKED" : "";
    const [row] = await this.#db.query(
      `UPDATE galley_jobs SET status = 'in_progress', owner = $1, lease_until = $2, started_at = $3,
         attempts = attempts + 1, progress = 0
       WHERE seq = (SELECT seq FROM galley_jobs j WHERE status = 'queued'
         AND ($4 = 0 OR j.client = '' OR (SELECT count(*) FROM galley_jobs r
           WHERE r.client = j.client AND r.status = 'in_progress') < $4)
         ORDER BY rank, seq LIMIT 1 ${lock}) AND status = 'queued'
       RETURNING *`,
      [owner, leaseUntil, Math.floor(now / 1000), perClient],
    );
    return row ? toJob(row) : undefined;
  }

  /** Extend the leases of `owner`'s running jobs. */
  async renew(owner: string, leaseUntil: number): Promise<void> {
    await this.#db.query("UPDATE galley_jobs SET lease_until = $1 WHERE owner = $2 AND status = 'in_progress'", [
      leaseUntil,
      owner,
    ]);
  }

  /** Record a running job's progress and outputs; false once the job is no longer `owner`'s to run (cancelled). */
  async progress(id: string, owner: string, progress: number, outputs: Job["outputs"]): Promise<boolean> {
    const rows = await this.#db.query(
      "UPDATE galley_jobs SET progress = $1, outputs = $2 WHERE id = $3 AND owner = $4 AND status = 'in_progress' RETURNING seq",
      [progress, JSON.stringify(outputs), id, owner],
    );
    return rows.length > 0;
  }

  /**
   * Move a job that is not final yet to a final status (or back to `queued`, its last start not
   * counted); with `owner`, only
   * while that owner runs it. The job as it now is, or undefined when it was final already (or
   * not the owner's).
   */
  async finish(
    id: string,
    status: JobStatus,
    fields: { now: number; error?: { code: string; message: string }; outputs?: Job["outputs"]; owner?: string },
  ): Promise<Job | undefined> {
    const params: SqlValue[] = [
      status,
      status === "queued" ? null : Math.floor(fields.now / 1000),
      fields.error?.code ?? null,
      fields.error?.message ?? null,
      id,
    ];
    let sets = "status = $1, completed_at = $2, error_code = $3, error_message = $4, owner = NULL, lease_until = NULL";
    if (status === "completed") sets += ", progress = 100";
    // Back to the queue from a graceful stop: the start it was given does not count.
    if (status === "queued") sets += ", progress = 0, started_at = NULL, attempts = attempts - 1";
    if (fields.outputs) {
      params.push(JSON.stringify(fields.outputs));
      sets += `, outputs = $${params.length}`;
    }
    let where = "id = $5 AND status IN ('queued', 'in_progress')";
    if (fields.owner !== undefined) {
      params.push(fields.owner);
      where += ` AND owner = $${params.length}`;
    }
    const sql = `UPDATE galley_jobs SET ${sets} WHERE ${where} RETURNING *`;
    if (!this.#outbox || status === "queued") {
      const [row] = await this.#db.query(sql, params);
      return row ? toJob(row) : undefined;
    }
    return this.#db.transaction(async (q) => {
      const [row] = await q(sql, params);
      if (!row) return undefined;
      const job = toJob(row);
      await this.#record(q, job, fields.now);
      return job;
    });
  }

  /** Write the webhook event of a job that has just ended, unless the outbox is full. */
  async #record(q: SqlDriver["query"], job: Job, now: number): Promise<void> {
    const event = this.#outbox?.event(job);
    if (!event || !this.#outbox) return;
    const [count] = await q("SELECT count(*) AS n FROM galley_webhooks");
    if (Number(count?.n ?? 0) >= this.#outbox.maxPending) {
      this.#outbox.log.warn(
        `webhook ${event.id} for ${job.id} (${job.status}) to ${event.url} dropped: ${this.#outbox.maxPending} already waiting`,
      );
      return;
    }
    await q(
      `INSERT INTO galley_webhooks (id, job_id, url, body, attempts, next_at, created_at)
       VALUES ($1, $2, $3, $4, 0, $5, $5)`,
      [event.id, job.id, event.url, event.body, now],
    );
  }

  /**
   * Running jobs whose lease ran out (their server stopped without finishing them): queued again
   * while they have been started fewer than `maxAttempts` times, failed `interrupted` after.
   * The failed ones are returned (their webhooks are due).
   */
  async recover(now: number, maxAttempts: number): Promise<Job[]> {
    return this.#db.transaction(async (q) => {
      await q(
        `UPDATE galley_jobs SET status = 'queued', owner = NULL, lease_until = NULL, progress = 0, started_at = NULL
       WHERE status = 'in_progress' AND lease_until < $1 AND attempts < $2`,
        [now, maxAttempts],
      );
      const rows = await q(
        `UPDATE galley_jobs SET status = 'failed', owner = NULL, lease_until = NULL, completed_at = $3,
         error_code = 'interrupted', error_message = $4
       WHERE status = 'in_progress' AND lease_until < $1 AND attempts >= $2 RETURNING *`,
        [
          now,
          maxAttempts,
          Math.floor(now / 1000),
          `the server running this job stopped ${maxAttempts} times before it finished`,
        ],
      );
      const failed = rows.map(toJob);
      for (const job of failed) await this.#record(q, job, now);
      return failed;
    });
  }

  /**
   * End every lease now: at the start of the only server on an embedded store, its jobs' runner
   * and its webhook deliveries are gone (an attempt cut short stays counted).
   */
  async expireLeases(): Promise<void> {
    await this.#db.query("UPDATE galley_jobs SET lease_until = 0 WHERE status = 'in_progress'");
    await this.#db.query("UPDATE galley_webhooks SET owner = NULL, lease_until = NULL WHERE owner IS NOT NULL");
  }

  /**
   * Lease up to `limit` due webhook events to `owner` until `leaseUntil` (ms), oldest due first,
   * counting the attempt it is about to make. With PostgreSQL the rows are locked `FOR UPDATE SKIP
   * LOCKED`, and a leased event is not due for anyone else until its lease runs out, so one
   * server delivers each event at a time.
   */
  async claimWebhooks(owner: string, now: number, leaseUntil: number, limit: number): Promise<PendingWebhook[]> {
    const lock = this.#db.dialect === "postgres" ? "FOR UPDATE SKIP LOCKED" : "";
    const due = "next_at <= $3 AND (lease_until IS NULL OR lease_until < $3)";
    const rows = await this.#db.query(
      `UPDATE galley_webhooks SET owner = $1, lease_until = $2, attempts = attempts + 1
       WHERE seq IN (SELECT seq FROM galley_webhooks WHERE ${due} ORDER BY next_at, seq LIMIT $4 ${lock}) AND ${due}
       RETURNING *`,
      [owner, leaseUntil, now, limit],
    );
    return rows
      .sort((a, b) => Number(a.seq) - Number(b.seq))
      .map((row) => ({
        id: String(row.id),
        jobId: String(row.job_id),
        url: String(row.url),
        body: String(row.body),
        attempts: Number(row.attempts),
      }));
  }

  /** Remove a delivered event (whoever holds it now: it is done). */
  async webhookDelivered(id: string): Promise<void> {
    await this.#db.query("DELETE FROM galley_webhooks WHERE id = $1", [id]);
  }

  /** An attempt of `owner`'s failed: due again at `nextAt` (ms), or, with `nextAt` undefined, removed. */
  async webhookFailed(id: string, owner: string, nextAt: number | undefined): Promise<void> {
    if (nextAt === undefined) {
      await this.#db.query("DELETE FROM galley_webhooks WHERE id = $1 AND owner = $2", [id, owner]);
      return;
    }
    await this.#db.query(
      "UPDATE galley_webhooks SET owner = NULL, lease_until = NULL, next_at = $3 WHERE id = $1 AND owner = $2",
      [id, owner, nextAt],
    );
  }

  /** Give `owner`'s leased events back at a graceful stop, due at once; the attempts cut short do not count. */
  async releaseWebhooks(owner: string): Promise<void> {
    await this.#db.query(
      "UPDATE galley_webhooks SET owner = NULL, lease_until = NULL, attempts = attempts - 1 WHERE owner = $1",
      [owner],
    );
  }

  /** How many webhook events wait for delivery (leased ones included). */
  async pendingWebhooks(): Promise<number> {
    const [row] = await this.#db.query("SELECT count(*) AS n FROM galley_webhooks");
    return Number(row?.n ?? 0);
  }

  /** Delete the records of jobs that expired by `now` (ms); their ids, for their outputs to be deleted. */
  async expire(now: number): Promise<string[]> {
    const rows = await this.#db.query(
      "DELETE FROM galley_jobs WHERE expires_at <= $1 AND status NOT IN ('queued', 'in_progress') RETURNING id",
      [Math.floor(now / 1000)],
    );
    return rows.map((row) => String(row.id));
  }

  /** Delete a job's record (a final one: a queued or running job is cancelled first). */
  async delete(id: string): Promise<boolean> {
    const rows = await this.#db.query(
      "DELETE FROM galley_jobs WHERE id = $1 AND status NOT IN ('queued', 'in_progress') RETURNING id",
      [id],
    );
    return rows.length > 0;
  }

  /** How many jobs are queued. */
  async queued(): Promise<number> {
    const [row] = await this.#db.query("SELECT count(*) AS n FROM galley_jobs WHERE status = 'queued'");
    return Number(row?.n ?? 0);
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}

const optional = (value: unknown): number | undefined =>
  value === null || value === undefined ? undefined : Number(value);

function toJob(row: Row): Job {
  const job: Job = {
    id: String(row.id),
    seq: Number(row.seq),
    model: String(row.model),
    prompt: String(row.prompt),
    size: String(row.size),
    frames: Number(row.frames),
    steps: Number(row.steps),
    priority: String(row.priority) as PriorityClass,
    status: String(row.status) as JobStatus,
    progress: Number(row.progress),
    createdAt: Number(row.created_at),
    expiresAt: Number(row.expires_at),
    client: String(row.client),
    requestDigest: String(row.request_digest),
    attempts: Number(row.attempts),
    outputs: JSON.parse(String(row.outputs)) as Partial<Record<OutputVariant, string>>,
  };
  const seed = optional(row.seed);
  if (seed !== undefined) job.seed = seed;
  if (row.webhook_url) job.webhookUrl = String(row.webhook_url);
  const started = optional(row.started_at);
  if (started !== undefined) job.startedAt = started;
  const completed = optional(row.completed_at);
  if (completed !== undefined) job.completedAt = completed;
  if (row.idempotency_key !== null && row.idempotency_key !== undefined)
    job.idempotencyKey = String(row.idempotency_key);
  if (row.error_code) job.error = { code: String(row.error_code), message: String(row.error_message ?? "") };
  if (row.trace_parent)
    job.traceContext = {
      traceparent: String(row.trace_parent),
      ...(row.trace_state ? { tracestate: String(row.trace_state) } : {}),
    };
  return job;
}
