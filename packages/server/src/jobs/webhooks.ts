// Webhooks per Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`,
// `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`
// keyed with the configured `whsec_` secret. An event's id and body are fixed when it is recorded
// (in the job store's outbox); each attempt signs them with its own timestamp.
import { createHmac, randomUUID } from "node:crypto";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import type { WebhookEvent } from "./job-store.js";
import { publicLookup } from "./webhook-target.js";

/** Webhook delivery options (`--videos-webhook-*`). */
export interface WebhookOptions {
  /** The signing secret: `whsec_` and base64 bytes (any other text is used as the key's bytes). */
  secret: string;
  /** Deliver to private and loopback addresses too (default false). */
  allowPrivate?: boolean;
  /** Attempts per event (default 5): after the first, waits of 1, 2, 4, 8 s… (doubling, at most 5 min). */
  attempts?: number;
  /** Each attempt's time limit in ms, connecting and the answer included (default 10 000). */
  timeoutMs?: number;
  /**
   * The most events waiting for delivery, across servers sharing the store (default 10 000): a
   * job that ends past it records no event (the newest is dropped), logged.
   */
  maxPending?: number;
  /** The first retry's wait in ms (default 1000; tests shorten it). */
  backoffMs?: number;
}

/** The key bytes of a secret (`whsec_<base64>`, or the text itself). */
export function webhookKey(secret: string): Buffer {
  return secret.startsWith("whsec_") ? Buffer.from(secret.slice(6), "base64") : Buffer.from(secret, "utf8");
}

/** `v1,<signature>` of a message, as Standard Webhooks signs it. */
export function signWebhook(key: Buffer, id: string, timestamp: number, body: string): string {
  return `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`;
}

/** A new event for `url`: a fresh `webhook-id` and the body every attempt will send. */
export function webhookEvent(url: string, type: string, data: unknown): WebhookEvent {
  return {
    id: `msg_${randomUUID().replaceAll("-", "")}`,
    url,
    body: JSON.stringify({ type, timestamp: new Date().toISOString(), data }),
  };
}

/**
 * One signed attempt: POST the event; resolves with the answer's status, rejects when no answer
 * came within `timeoutMs` (the whole exchange), the address is refused, or `signal` aborts.
 */
export function postWebhook(
  event: WebhookEvent,
  key: Buffer,
  options: { timeoutMs: number; allowPrivate: boolean; signal: AbortSignal },
): Promise<number> {
  const timestamp = Math.floor(Date.now() / 1000);
  const target = new URL(event.url);
  const send = target.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise<number>((resolveAnswer, rejectAnswer) => {
    let deadline: NodeJS.Timeout | undefined;
    const resolve = (status: number) => {
      clearTimeout(deadline);
      resolveAnswer(status);
    };
    const reject = (error: unknown) => {
      clearTimeout(deadline);
      rejectAnswer(error);
    };
    const req = send(
      target,
      {
        method: "POST",
        headers: {
          "webhook-id": event.id,
          "webhook-timestamp": String(timestamp),
          "webhook-signature": signWebhook(key, event.id, timestamp, event.body),
          "content-type": "application/json",
          "content-length": Buffer.byteLength(event.body),
        },
        signal: options.signal,
        ...(options.allowPrivate ? {} : { lookup: publicLookup }),
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", reject);
      },
    );
    deadline = setTimeout(() => req.destroy(new Error(`no answer in ${options.timeoutMs} ms`)), options.timeoutMs);
    req.on("error", reject);
    req.end(event.body);
  });
}
