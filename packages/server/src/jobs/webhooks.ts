// Webhooks per Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`,
// `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`
// keyed with the configured `whsec_` secret. Delivered off the job's path, retried with back-off.
import { createHmac, randomUUID } from "node:crypto";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import type { Logger } from "../base/log.js";
import { publicLookup } from "./webhook-target.js";

/** Webhook delivery options (`--videos-webhook-*`). */
export interface WebhookOptions {
  /** The signing secret: `whsec_` and base64 bytes (any other text is used as the key's bytes). */
  secret: string;
  /** Deliver to private and loopback addresses too (default false). */
  allowPrivate?: boolean;
  /** Attempts per event (default 5): after the first, waits of 1, 2, 4, 8 s… (doubling, at most 5 min). */
  attempts?: number;
  /** Each attempt's time limit in ms (default 10 000). */
  timeoutMs?: number;
  /** The most events waiting for delivery (default 10 000); past it the oldest is dropped, logged. */
  maxPending?: number;
  /** The first retry's wait in ms (default 1000; tests shorten it). */
  backoffMs?: number;
}

/** Sends signed events. */
export interface WebhookSender {
  /** Queue an event for `url`; returns at once. */
  send(url: string, type: string, data: unknown): void;
  /** Stop: pending retries are dropped. */
  close(): void;
}

/** The key bytes of a secret (`whsec_<base64>`, or the text itself). */
export function webhookKey(secret: string): Buffer {
  return secret.startsWith("whsec_") ? Buffer.from(secret.slice(6), "base64") : Buffer.from(secret, "utf8");
}

/** `v1,<signature>` of a message, as Standard Webhooks signs it. */
export function signWebhook(key: Buffer, id: string, timestamp: number, body: string): string {
  return `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`;
}

/** A sender: one delivery at a time per event, every event independent of the others. */
export function createWebhookSender(options: WebhookOptions, log: Logger): WebhookSender {
  const key = webhookKey(options.secret);
  const attempts = options.attempts ?? 5;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const maxPending = options.maxPending ?? 10_000;
  const backoffMs = options.backoffMs ?? 1000;
  const timers = new Set<NodeJS.Timeout>();
  let pending = 0;
  let closed = false;

  const deliver = (url: string, id: string, body: string, attempt: number) => {
    if (closed) return;
    const timestamp = Math.floor(Date.now() / 1000);
    post(url, body, {
      "webhook-id": id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signWebhook(key, id, timestamp, body),
    })
      .then((status) => {
        if (status >= 200 && status < 300) return true;
        throw new Error(`answered ${status}`);
      })
      .catch((error: unknown) => {
        if (attempt + 1 >= attempts || closed) {
          log.warn(`webhook ${id} to ${url} failed ${attempt + 1} times, dropped: ${String(error)}`);
          return true;
        }
        const timer = setTimeout(
          () => {
            timers.delete(timer);
            deliver(url, id, body, attempt + 1);
          },
          Math.min(300_000, backoffMs * 2 ** attempt),
        );
        timer.unref();
        timers.add(timer);
        return false;
      })
      .then((done) => {
        if (done) pending--;
      });
  };

  const post = (url: string, body: string, headers: Record<string, string>) =>
    new Promise<number>((resolve, reject) => {
      const target = new URL(url);
      const send = target.protocol === "https:" ? httpsRequest : httpRequest;
      const req = send(
        target,
        {
          method: "POST",
          headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) },
          timeout: timeoutMs,
          ...(options.allowPrivate ? {} : { lookup: publicLookup }),
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
      req.on("error", reject);
      req.end(body);
    });

  return {
    send(url, type, data) {
      if (closed) return;
      if (pending >= maxPending) {
        log.warn(`webhook to ${url} dropped: ${maxPending} already waiting`);
        return;
      }
      pending++;
      const id = `msg_${randomUUID().replaceAll("-", "")}`;
      const body = JSON.stringify({ type, timestamp: new Date().toISOString(), data });
      deliver(url, id, body, 0);
    },
    close() {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}
