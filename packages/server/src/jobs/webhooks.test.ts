// One signed attempt against a real local receiver: Standard Webhooks' headers and signature
// (checked here with node:crypto, independently of the signer), loopback targets refused unless
// allowed, and a receiver that never answers cut off at the time limit.
import { createHmac } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { postWebhook, webhookEvent, webhookKey } from "./webhooks.js";

const SECRET = `whsec_${Buffer.from("0123456789abcdef0123456789abcdef").toString("base64")}`;
const KEY = webhookKey(SECRET);

let receiver: Server | undefined;

afterEach(async () => {
  receiver?.closeAllConnections();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
  receiver = undefined;
});

/** A receiver that hands each request to `handle`; its URL. */
async function receive(handle: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<string> {
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => handle(req, body, res));
  });
  await new Promise<void>((resolve) => receiver?.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
}

const options = (overrides: { allowPrivate?: boolean; timeoutMs?: number } = {}) => ({
  allowPrivate: true,
  timeoutMs: 10_000,
  signal: new AbortController().signal,
  ...overrides,
});

describe("postWebhook", () => {
  it("signs the event's id, a fresh timestamp and its body as Standard Webhooks does", async () => {
    let got: { headers: IncomingMessage["headers"]; body: string } | undefined;
    const url = await receive((req, body, res) => {
      got = { headers: req.headers, body };
      res.writeHead(503).end();
    });
    const event = webhookEvent(url, "video.completed", { id: "video_1", status: "completed" });
    expect(event.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(await postWebhook(event, KEY, options())).toBe(503);
    const headers = got?.headers ?? {};
    const timestamp = headers["webhook-timestamp"] as string;
    expect(headers["webhook-id"]).toBe(event.id);
    expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(60);
    const key = Buffer.from(SECRET.slice("whsec_".length), "base64");
    const expected = createHmac("sha256", key).update(`${event.id}.${timestamp}.${got?.body}`).digest("base64");
    expect(headers["webhook-signature"]).toBe(`v1,${expected}`);
    expect(headers["content-type"]).toBe("application/json");
    expect(got?.body).toBe(event.body);
    expect(JSON.parse(event.body)).toMatchObject({
      type: "video.completed",
      data: { id: "video_1", status: "completed" },
    });
  });

  it("never posts to a loopback address unless allowed", async () => {
    let posted = 0;
    const url = await receive((_req, _body, res) => {
      posted++;
      res.writeHead(200).end();
    });
    const event = webhookEvent(url.replace("127.0.0.1", "localhost"), "video.failed", {});
    await expect(postWebhook(event, KEY, options({ allowPrivate: false }))).rejects.toThrow(/private or loopback/);
    expect(posted).toBe(0);
    expect(await postWebhook(event, KEY, options())).toBe(200);
    expect(posted).toBe(1);
  });

  it("gives up on a receiver that does not answer within the time limit", async () => {
    const url = await receive(() => {});
    const event = webhookEvent(url, "video.failed", {});
    await expect(postWebhook(event, KEY, options({ timeoutMs: 200 }))).rejects.toThrow("no answer in 200 ms");
  });
});
