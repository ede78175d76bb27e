// galley-video --async against a real server with the videos API over the CPU pipeline (64x64,
// few steps): submit, follow, download; Ctrl-C cancels on the server, or with --detach leaves the
// job running for --resume; API keys; each usage mistake and each server refusal as one line.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger, createServer } from "@galley/server";
import { GifReader } from "omggif";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY_ENV } from "../src/async-video.js";
import { runCli } from "../src/cli.js";
import { call, MODELS, startVideosServer, type VideosServer, waitFor } from "./videos-helpers.js";

let api: VideosServer;
let dir: string;

beforeAll(async () => {
  api = await startVideosServer({ concurrency: 1 });
  dir = mkdtempSync(join(tmpdir(), "galley-video-async-"));
});

afterAll(async () => {
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Output collected; `until` resolves once the text matches. */
function capture() {
  let text = "";
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  return {
    write(chunk: string) {
      text += chunk;
      for (const w of waiters.filter((w) => w.pattern.test(text))) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
      return true;
    },
    get text() {
      return text;
    },
    until(pattern: RegExp): Promise<void> {
      if (pattern.test(text)) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ pattern, resolve }));
    },
  };
}

const tiny = ["--resolution", "64x64", "--frames", "3"];

describe("galley-video --async", () => {
  it("submits, follows the progress, writes previews and downloads the video", async () => {
    const stdout = capture();
    const stderr = capture();
    const previews = join(dir, "previews");
    const out = join(dir, "fox.mp4");
    const args = ["--async", "a red fox", ...tiny, "--steps", "10", "--priority", "high", "--preview-dir", previews];
    const code = await runCli([...args, "-u", api.base, "-o", out], { stdout, stderr });
    expect(stderr.text).toContain(`the server serves image/gif: writing ${join(dir, "fox.gif")}, not ${out}`);
    expect(code).toBe(0);
    const id = /submitted (video_[0-9a-f]{32}) \(queued/.exec(stdout.text)?.[1] as string;
    expect(id).toBeDefined();
    expect(stdout.text).toMatch(/step \d+\/100 running/);
    expect(stdout.text).toContain(`wrote ${join(dir, "fox.gif")} (image/gif)`);
    const gif = new GifReader(new Uint8Array(readFileSync(join(dir, "fox.gif"))));
    expect([gif.numFrames(), gif.width, gif.height]).toEqual([3, 64, 64]);
    const files = readdirSync(previews);
    expect(files.length).toBeGreaterThan(0);
    expect(files.every((f) => /^preview-\d{3}\.png$/.test(f))).toBe(true);
    const video = await call(api.base, "GET", `/v1/videos/${id}`);
    expect(video.body).toMatchObject({ status: "completed", priority: "high", steps: 10, size: "64x64" });
  });

  it("Ctrl-C cancels the job on the server", async () => {
    const stdout = capture();
    const stderr = capture();
    const ctrlC = new AbortController();
    const running = runCli(
      ["--async", "a long fox", ...tiny, "--steps", "200", "-u", api.base, "-o", join(dir, "x.gif")],
      {
        stdout,
        stderr,
        signal: ctrlC.signal,
      },
    );
    await stdout.until(/running/);
    ctrlC.abort();
    expect(await running).toBe(130);
    const id = /submitted (video_[0-9a-f]{32})/.exec(stdout.text)?.[1] as string;
    expect(stderr.text).toContain(`cancelled; the server stopped ${id}`);
    expect((await call(api.base, "GET", `/v1/videos/${id}`)).body.status).toBe("cancelled");
  });

  it("with --detach, Ctrl-C leaves the job running, and --resume downloads it", async () => {
    const stdout = capture();
    const stderr = capture();
    const ctrlC = new AbortController();
    const running = runCli(["--async", "--detach", "a fox", ...tiny, "--steps", "8", "-u", api.base], {
      stdout,
      stderr,
      signal: ctrlC.signal,
    });
    await stdout.until(/come back with: galley-video --async --resume video_/);
    ctrlC.abort();
    expect(await running).toBe(130);
    const id = /submitted (video_[0-9a-f]{32})/.exec(stdout.text)?.[1] as string;
    expect(stderr.text).toContain(`${id} keeps running on the server; galley-video --async --resume ${id}`);
    await waitFor(api.base, id, (v) => v.status === "completed");
    const again = capture();
    const out = join(dir, "resumed.gif");
    expect(await runCli(["--resume", id, "-u", api.base, "-o", out], { stdout: again, stderr })).toBe(0);
    expect(again.text).toContain(`following ${id} (completed`);
    expect(new GifReader(new Uint8Array(readFileSync(out))).numFrames()).toBe(3);
  });

  it("sends the API key from --api-key or the environment", async () => {
    const keyed = await startVideosServer({ apiKeys: ["alice-0123456789abcdef"] });
    try {
      const stderr = capture();
      const base = ["--async", "a fox", ...tiny, "--steps", "2", "-u", keyed.base, "-o", join(dir, "k.gif")];
      expect(await runCli(base, { stdout: capture(), stderr })).toBe(1);
      expect(stderr.text).toMatch(
        /^galley-video: the server at http:\/\/127\.0\.0\.1:\d+ needs an API key \(--api-key, or GALLEY_VIDEOS_API_KEY\)/,
      );
      expect(await runCli([...base, "--api-key", "alice-0123456789abcdef"], { stdout: capture(), stderr })).toBe(0);
      process.env[API_KEY_ENV] = "alice-0123456789abcdef";
      try {
        expect(await runCli(base, { stdout: capture(), stderr })).toBe(0);
      } finally {
        delete process.env[API_KEY_ENV];
      }
    } finally {
      await keyed.close();
    }
  });

  it("refuses usage mistakes before asking the server (exit 2)", async () => {
    const cases: [string[], RegExp][] = [
      [["--async"], /give one prompt/],
      [["--async", "a", "--input", "x.gif"], /--input does not go with --async/],
      [["--async", "a", "--fps", "4"], /--fps does not go with --async/],
      [["--resume", "video_x"], /--resume takes a video id/],
      [["--resume", `video_${"0".repeat(32)}`, "a fox"], /a prompt or --resume, not both/],
      [["--async", "a", "--priority", "urgent"], /--priority must be high, normal or low/],
      [["--async", "a", "--resolution", "big"], /--resolution must look like 128x128/],
      [["--async", "a", "-o", join(dir, "x.webm")], /give a file name ending in \.mp4 or \.gif \(not \.webm\)/],
      [["a", "--detach"], /--detach goes with --async/],
    ];
    for (const [args, pattern] of cases) {
      const stderr = capture();
      expect(await runCli([...args, "-u", "127.0.0.1:9"], { stdout: capture(), stderr }), args.join(" ")).toBe(2);
      expect(stderr.text).toMatch(pattern);
    }
  });

  it("explains a server that refuses, lacks the API, or is not there (exit 1)", async () => {
    const check = async (args: string[], url: string, pattern: RegExp) => {
      const stderr = capture();
      expect(await runCli(["--async", ...args, "-u", url], { stdout: capture(), stderr })).toBe(1);
      expect(stderr.text).toMatch(pattern);
    };
    await check(
      ["a fox", "--resolution", "65x65"],
      api.base,
      /the server rejected the request: size '65x65' is not supported .* \(size\)/,
    );
    await check(["--resume", `video_${"0".repeat(32)}`], api.base, /the server rejected the request: .*video_0+/);
    await check(["a fox"], "127.0.0.1:9", /cannot reach a server at http:\/\/127\.0\.0\.1:9 .*--videos-api=true/s);
    const plain = createServer({
      modelRepositories: [MODELS],
      http: { host: "127.0.0.1", port: 0 },
      grpc: false,
      metrics: false,
      log: createLogger({ write: () => {} }),
    });
    const { http } = await plain.listen();
    try {
      await check(
        ["a fox"],
        `127.0.0.1:${http?.port}`,
        /does not serve the videos API \(start it with --videos-api=true\)/,
      );
    } finally {
      await plain.close();
    }
  });
});
