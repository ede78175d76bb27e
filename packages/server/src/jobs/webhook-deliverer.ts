// Delivers the webhook events the job store's outbox holds, off the jobs' path: due events are
// leased from the store (so that one server at a time delivers each, whichever server recorded
// it), posted, and then removed, or scheduled again with back-off and their attempt count kept in
// the store, so a restart or a crash loses none and resends each with its own `webhook-id`.
import type { Logger } from "../base/log.js";
import type { JobStore, PendingWebhook } from "./job-store.js";
import { postWebhook, type WebhookOptions, webhookKey } from "./webhooks.js";

/** Deliveries one server has in flight at most. */
export const WEBHOOK_CONCURRENCY = 16;

/** The longest wait between two attempts of an event. */
export const MAX_WEBHOOK_BACKOFF_MS = 300_000;

/** A running deliverer. */
export interface WebhookDeliverer {
  /** Look for due events now (one was just recorded). */
  wake(): void;
  /** Stop: attempts in flight are cut short and their events given back to the store. */
  close(): Promise<void>;
}

/**
 * Start delivering `store`'s events as `owner`, looking for due ones every `pollMs` (events other
 * servers recorded, retries, leases of crashed servers that ran out) and whenever woken.
 */
export function createWebhookDeliverer(
  store: JobStore,
  options: WebhookOptions,
  owner: string,
  pollMs: number,
  log: Logger,
): WebhookDeliverer {
  const key = webhookKey(options.secret);
  const maxAttempts = options.attempts ?? 5;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const backoffMs = options.backoffMs ?? 1000;
  const allowPrivate = options.allowPrivate ?? false;
  // Longer than an attempt and the write of its result: a lease still held is a live attempt.
  const leaseMs = 3 * timeoutMs;
  const inFlight = new Map<string, AbortController>();
  const tasks = new Set<Promise<void>>();
  let closed = false;
  let draining: Promise<void> | undefined;
  let again = false;
  let retry: NodeJS.Timeout | undefined;
  let retryAt = Number.POSITIVE_INFINITY;

  const wake = () => {
    if (closed) return;
    if (draining) {
      // Looked again once this drain ends (it may have looked before this event was due).
      again = true;
      return;
    }
    again = false;
    draining = drain()
      .catch((error: unknown) => log.error(`webhooks: claiming due events failed: ${String(error)}`))
      .finally(() => {
        draining = undefined;
        if (again) wake();
      });
  };

  const drain = async () => {
    while (!closed && inFlight.size < WEBHOOK_CONCURRENCY) {
      const room = WEBHOOK_CONCURRENCY - inFlight.size;
      const now = Date.now();
      const due = await store.claimWebhooks(owner, now, now + leaseMs, room);
      // Claimed while stopping: left leased, and given back by close.
      if (closed) return;
      for (const event of due) start(event);
      if (due.length < room) return;
    }
  };

  /** Wake at `at` (ms) for a retry, unless an earlier wake is set. */
  const wakeAt = (at: number) => {
    if (closed || at >= retryAt) return;
    clearTimeout(retry);
    retryAt = at;
    retry = setTimeout(
      () => {
        retryAt = Number.POSITIVE_INFINITY;
        // Timers may fire a millisecond before the wall clock says `at`: the event is not due yet.
        if (Date.now() < at) wakeAt(at);
        else wake();
      },
      Math.max(0, at - Date.now()),
    );
    retry.unref();
  };

  const start = (event: PendingWebhook) => {
    const controller = new AbortController();
    inFlight.set(event.id, controller);
    const task = attempt(event, controller.signal)
      .catch((error: unknown) => log.error(`webhooks: recording the attempt of ${event.id} failed: ${String(error)}`))
      .finally(() => {
        inFlight.delete(event.id);
        tasks.delete(task);
        wake();
      });
    tasks.add(task);
  };

  const attempt = async (event: PendingWebhook, signal: AbortSignal) => {
    if (event.attempts > maxAttempts) {
      // Its last attempt was cut short by a crash.
      log.warn(`webhook ${event.id} for ${event.jobId} to ${event.url} had its ${maxAttempts} attempts, dropped`);
      await store.webhookFailed(event.id, owner, undefined);
      return;
    }
    let problem: string;
    try {
      const status = await postWebhook(event, key, { timeoutMs, allowPrivate, signal });
      if (status >= 200 && status < 300) {
        await store.webhookDelivered(event.id);
        return;
      }
      problem = `answered ${status}`;
    } catch (error) {
      if (signal.aborted) return;
      problem = error instanceof Error ? error.message : String(error);
    }
    if (event.attempts >= maxAttempts) {
      log.warn(
        `webhook ${event.id} for ${event.jobId} to ${event.url} failed ${event.attempts} times, dropped: ${problem}`,
      );
      await store.webhookFailed(event.id, owner, undefined);
      return;
    }
    const nextAt = Date.now() + Math.min(MAX_WEBHOOK_BACKOFF_MS, backoffMs * 2 ** (event.attempts - 1));
    await store.webhookFailed(event.id, owner, nextAt);
    wakeAt(nextAt);
  };

  const poll = setInterval(wake, pollMs);
  poll.unref();
  wake();

  return {
    wake,
    async close() {
      closed = true;
      clearInterval(poll);
      clearTimeout(retry);
      for (const controller of inFlight.values()) controller.abort();
      await draining;
      await Promise.all(tasks);
      await store.releaseWebhooks(owner);
    },
  };
}
