// The videos page (`galley serve --videos-api=true --videos-ui=true`) in headless Chromium
// (Debian's chromium, driven by puppeteer-core), over the example's CPU pipeline at 64x64: submit
// a prompt, see a preview, see the MP4 play, come back to it in a new tab, cancel another, all
// without a console error; an API key entered on the page; the static routes and their headers.
// The functions passed to the page run in Chromium: typed with the DOM's declarations.
/// <reference lib="dom" />
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger, createServer } from "@galley/server";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, MODELS, startVideosServer, type VideosServer } from "./videos-helpers.js";

/** Debian's chromium (CI installs it: .ci/run), or the one CHROMIUM names. */
const CHROMIUM = [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"].find(
  (path): path is string => path !== undefined && path !== "" && existsSync(path),
);

let api: VideosServer;
let browser: Browser;

beforeAll(async () => {
  if (!CHROMIUM) throw new Error("no Chromium: apt-get install chromium (or set CHROMIUM to its path)");
  // MP4 through ffmpeg (on PATH in CI), as a person's server would serve it.
  api = await startVideosServer({ concurrency: 1, page: true, ffmpeg: "ffmpeg" });
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    pipe: true,
    // As root in a container: no sandbox; /dev/shm may be small.
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--mute-audio"],
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await api?.close();
});

/** A tab whose console errors, page errors and failed requests are collected. */
async function open(url: string): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(`console: ${message.text()}`);
  });
  page.on("pageerror", (error) => errors.push(`page: ${error}`));
  page.on("requestfailed", (request) => {
    // A stream the page closed itself (switching videos, closing the tab) is not a failure.
    if (!request.url().endsWith("/events")) errors.push(`request: ${request.url()} ${request.failure()?.errorText}`);
  });
  await page.goto(url, { waitUntil: "load" });
  return { page, errors };
}

const text = (page: Page, selector: string) => page.$eval(selector, (e) => e.textContent ?? "");

async function submit(page: Page, prompt: string, steps: number): Promise<string> {
  await page.locator("#prompt").fill(prompt);
  await page.locator("#size").fill("64x64");
  await page.locator("#frames").fill("3");
  await page.locator("#steps").fill(String(steps));
  await page.locator("#generate").click();
  await page.waitForFunction(() => /^#video_[0-9a-f]{32}$/.test(location.hash));
  return page.evaluate(() => location.hash.slice(1));
}

// Each waits on Chromium and the pipeline (up to 60 s a step on a loaded machine).
describe("the videos page in Chromium", { timeout: 180_000 }, () => {
  it("generates a video: preview, then an MP4 that plays and downloads; a new tab comes back to it", async () => {
    const { page, errors } = await open(`${api.base}/videos`);
    expect(await page.title()).toBe("Galley videos");
    // Every control has an accessible name (labels, aria-label), as a screen reader reads them.
    const tree = await page.accessibility.snapshot({ interestingOnly: true });
    const unnamed: string[] = [];
    let controls = 0;
    const walk = (node: { role: string; name?: string; children?: unknown[] } | null | undefined) => {
      if (!node) return;
      if (["button", "textbox", "combobox", "spinbutton", "link", "progressbar"].includes(node.role)) {
        controls++;
        if (!node.name) unnamed.push(node.role);
      }
      for (const child of node.children ?? []) walk(child as typeof node);
    };
    walk(tree);
    // The form's six fields and its button, the key box's summary, Refresh.
    expect(controls).toBeGreaterThanOrEqual(8);
    expect(unnamed).toEqual([]);
    const id = await submit(page, "a red fox running in snow", 12);
    // A preview image, decoded (previews come every 5 steps).
    await page.waitForFunction(
      () => {
        const img = document.querySelector<HTMLImageElement>("#preview");
        return img?.src.startsWith("blob:") && img.complete && img.naturalWidth > 0;
      },
      { timeout: 60_000 },
    );
    // The finished MP4 in a <video>, its metadata loaded from its blob: URL.
    await page.waitForFunction(
      () => {
        const video = document.querySelector<HTMLVideoElement>("video#video");
        if (video?.error) throw new Error(`the video failed to load: ${video.error.message}`);
        return video !== null && video.readyState >= 1;
      },
      { timeout: 60_000 },
    );
    expect(await page.$eval("video#video", (v) => [v.src.slice(0, 5), v.videoWidth, v.videoHeight])).toEqual([
      "blob:",
      64,
      64,
    ]);
    expect(await text(page, "#status")).toBe("Completed");
    expect(await page.$eval("#download", (a) => [(a as HTMLAnchorElement).hidden, a.getAttribute("download")])).toEqual(
      [false, `${id}.mp4`],
    );
    await page.waitForFunction((id) => document.querySelector(`tr[data-id="${id}"]`) !== null, {}, id);
    expect(await text(page, `tr[data-id="${id}"] .status`)).toBe("Completed");
    await page.close();
    expect(errors).toEqual([]);

    // Closed and come back: the video is still there, from its link or from the list.
    const again = await open(`${api.base}/videos#${id}`);
    await again.page.waitForFunction(
      () => (document.querySelector<HTMLVideoElement>("video#video")?.readyState ?? 0) >= 1,
    );
    expect(await text(again.page, "#current-prompt")).toBe("a red fox running in snow");
    await again.page.close();
    expect(again.errors).toEqual([]);
  });

  it("cancels a running video, then deletes it", async () => {
    const { page, errors } = await open(`${api.base}/videos`);
    const id = await submit(page, "a very long fox", 1000);
    // Clicked in the task that sees it running: a 1,000-step video at 64x64 takes about a second,
    // less than a locator's wait for a stable button under the progress bar's updates.
    await page.waitForFunction(
      () => {
        if (!/^Running/.test(document.querySelector("#status")?.textContent ?? "")) return false;
        document.querySelector<HTMLButtonElement>("#cancel")?.click();
        return true;
      },
      { timeout: 60_000 },
    );
    await page.waitForFunction(() => document.querySelector("#status")?.textContent === "Cancelled");
    expect((await call(api.base, "GET", `/v1/videos/${id}`)).body.status).toBe("cancelled");
    expect(await page.$eval("#cancel", (b) => (b as HTMLButtonElement).hidden)).toBe(true);
    await page.waitForFunction(
      (id) => document.querySelector(`tr[data-id="${id}"] .status`)?.textContent === "Cancelled",
      {},
      id,
    );
    // A finished video's row offers Delete (after a confirmation): the record and its files go.
    page.once("dialog", (dialog) => void dialog.accept());
    await page.locator(`tr[data-id="${id}"] button:last-child`).click();
    await page.waitForFunction((id) => document.querySelector(`tr[data-id="${id}"]`) === null, {}, id);
    expect((await call(api.base, "GET", `/v1/videos/${id}`)).status).toBe(404);
    expect(await page.$eval("#current", (s) => (s as HTMLElement).hidden)).toBe(true);
    await page.close();
    expect(errors).toEqual([]);
  });

  it("follows a video through a server restart to its end", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-videos-page-"));
    const start = async (port: number) => {
      const server = createServer({
        modelRepositories: [MODELS],
        http: { host: "127.0.0.1", port },
        grpc: false,
        metrics: false,
        jobs: { jobsDir: dir, ffmpeg: false, concurrency: 1, page: true },
        log: createLogger({ write: () => {} }),
      });
      const { http } = await server.listen();
      return { server, port: http?.port as number };
    };
    let running = await start(0);
    try {
      // The tab's requests fail while the server is down (console errors): not counted here.
      const page = await browser.newPage();
      await page.goto(`http://127.0.0.1:${running.port}/videos`, { waitUntil: "load" });
      const id = await submit(page, "a fox through a restart", 400);
      await page.waitForFunction(() => /^Running/.test(document.querySelector("#status")?.textContent ?? ""), {
        timeout: 60_000,
      });
      await page.evaluate(() => {
        const seen: string[] = [];
        (window as unknown as { seen: string[] }).seen = seen;
        const status = document.querySelector("#status") as HTMLElement;
        new MutationObserver(() => seen.push(status.textContent ?? "")).observe(status, { childList: true });
      });
      // A graceful stop queues the running job again; the page's stream drops and reconnects.
      await running.server.close();
      running = await start(running.port);
      await page.waitForFunction(() => document.querySelector("#status")?.textContent === "Completed", {
        timeout: 120_000,
      });
      await page.waitForFunction(() => (document.querySelector<HTMLImageElement>("img#video")?.naturalWidth ?? 0) > 0);
      expect((await call(`http://127.0.0.1:${running.port}`, "GET", `/v1/videos/${id}`)).body.status).toBe("completed");
      const seen = await page.evaluate(() => (window as unknown as { seen: string[] }).seen);
      expect(seen).toContain("Reconnecting…");
      expect(seen.at(-1)).toBe("Completed");
      await page.close();
    } finally {
      await running.server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("asks for the API key when the server has keys, and uses the one entered", async () => {
    const keyed = await startVideosServer({ page: true, apiKeys: ["alice-0123456789abcdef"] });
    try {
      const page = await browser.newPage();
      await page.goto(`${keyed.base}/videos`, { waitUntil: "load" });
      await page.waitForFunction(() => /needs an API key/.test(document.querySelector("#message")?.textContent ?? ""));
      expect(await page.$eval("#key-box", (d) => (d as HTMLDetailsElement).open)).toBe(true);
      const created = await call(
        keyed.base,
        "POST",
        "/v1/videos",
        { model: "text_to_video", prompt: "keyed fox", size: "64x64", frames: 1, steps: 1 },
        {
          authorization: "Bearer alice-0123456789abcdef",
        },
      );
      // Ten to a page: eleven more videos, then the oldest behind "Older videos".
      for (let i = 0; i < 11; i++) {
        await call(
          keyed.base,
          "POST",
          "/v1/videos",
          { model: "text_to_video", prompt: `fox ${i}`, size: "64x64", frames: 1, steps: 1 },
          { authorization: "Bearer alice-0123456789abcdef" },
        );
      }
      await page.locator("#api-key").fill("alice-0123456789abcdef");
      await page.locator("#key-form button").click();
      await page.waitForFunction(() => document.querySelectorAll("#videos tr").length === 10);
      expect(await text(page, "#message")).toBe("");
      expect(await page.$eval("#more", (b) => (b as HTMLButtonElement).hidden)).toBe(false);
      await page.locator("#more").click();
      await page.waitForFunction(() => document.querySelectorAll("#videos tr").length === 12);
      expect(await page.$eval("#videos tr:last-child", (tr) => (tr as HTMLElement).dataset.id)).toBe(created.body.id);
      expect(await page.$eval("#more", (b) => (b as HTMLButtonElement).hidden)).toBe(true);
      await page.close();
    } finally {
      await keyed.close();
    }
  });
});

describe("the page's routes", () => {
  it("serve its files with a strict Content-Security-Policy; anything else is 404 or 405", async () => {
    for (const [path, type] of [
      ["/videos", "text/html; charset=utf-8"],
      ["/videos/", "text/html; charset=utf-8"],
      ["/videos/page.js", "text/javascript; charset=utf-8"],
      ["/videos/page.css", "text/css; charset=utf-8"],
      ["/videos/icon.svg", "image/svg+xml"],
    ]) {
      const res = await fetch(api.base + (path as string));
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-type")).toBe(type);
      expect(res.headers.get("content-security-policy")).toMatch(/^default-src 'none'; script-src 'self';/);
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    }
    const html = await (await fetch(`${api.base}/videos`)).text();
    // No inline script or style, nothing from another origin.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)|<style|style=|https?:\/\//);
    expect((await fetch(`${api.base}/videos/nope.js`)).status).toBe(404);
    expect((await fetch(`${api.base}/videos`, { method: "POST" })).status).toBe(405);
    const off = await startVideosServer();
    try {
      expect((await fetch(`${off.base}/videos`)).status).toBe(404);
    } finally {
      await off.close();
    }
  });
});
