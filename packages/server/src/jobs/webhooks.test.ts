// Webhook delivery to a real local receiver: Standard Webhooks' headers and signature (checked
// here with node:crypto, independently of the sender), retries with back-off after failures, and
// loopback targets refused unless allowed.
import { createHmac } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../base/log.js";
import { createWebhookSender, type WebhookSender } from "./webhooks.js";

const SECRET = `whsec_${Buffer.from("0123456789abcdef0123456789abcdef").toString("base64")}`;

interface Received {
  headers: IncomingMessage["headers"];
  body: string;
}

let receiver: Server | undefined;
let sender: WebhookSender | undefined;

afterEach(async () => {
  sender?.close();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
  receiver = undefined;
});

/** A receiver answering each delivery with the next status of `statuses` (then 200). */
async function receive(statuses: number[]): Promise<{ url: string; next: () => Promise<Received> }> {
  const waiting: ((r: Received) => void)[] = [];
  const arrived: Received[] = [];
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      res.writeHead(statuses.shift() ?? 200).end();
      const got = { headers: req.headers, body };
      const waiter = waiting.shift();
      if (waiter) waiter(got);
      else arrived.push(got);
    });
  });
  await new Promise<void>((resolve) => receiver?.listen(0, "127.0.0.1", resolve));
  const { port } = receiver.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    next: () => {
      const got = arrived.shift();
      return got ? Promise.resolve(got) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

describe("webhooks", () => {
  it("signs each delivery as Standard Webhooks does, and retries a failed one with the same id", async () => {
    const hook = await receive([500, 503]);
    const warnings: string[] = [];
    sender = createWebhookSender(
      { secret: SECRET, allowPrivate: true, backoffMs: 10 },
      createLogger({ write: (t) => warnings.push(t) }),
    );
    sender.send(hook.url, "video.completed", { id: "video_1", status: "completed" });
    const attempts = [await hook.next(), await hook.next(), await hook.next()];
    const ids = attempts.map((a) => a.headers["webhook-id"]);
    expect(new Set(ids).size).toBe(1);
    for (const { headers, body } of attempts) {
      const id = headers["webhook-id"] as string;
      const timestamp = headers["webhook-timestamp"] as string;
      expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(60);
      const key = Buffer.from(SECRET.slice("whsec_".length), "base64");
      const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64");
      expect(headers["webhook-signature"]).toBe(`v1,${expected}`);
      expect(headers["content-type"]).toBe("application/json");
      expect(JSON.parse(body)).toMatchObject({ type: "video.completed", data: { id: "video_1", status: "completed" } });
    }
  });

  it("gives up after its attempts, and never posts to a loopback address unless allowed", async () => {
    const hook = await receive([500, 500, 500]);
    const log: string[] = [];
    sender = createWebhookSender(
      { secret: SECRET, allowPrivate: true, backoffMs: 5, attempts: 2 },
      createLogger({ write: (t) => log.push(t) }),
    );
    sender.send(hook.url, "video.failed", {});
    await hook.next();
    await hook.next();
    sender.close();
    const refusedLog: string[] = [];
    const dropped = new Promise<void>((resolve) => {
      sender = createWebhookSender(
        { secret: SECRET, attempts: 1 },
        createLogger({
          write: (t) => {
            refusedLog.push(t);
            if (t.includes("dropped")) resolve();
          },
        }),
      );
    });
    sender?.send(hook.url.replace("127.0.0.1", "localhost"), "video.failed", {});
    await dropped;
    expect(refusedLog.join("")).toMatch(/failed 1 times, dropped: .*private or loopback/);
  });
});
