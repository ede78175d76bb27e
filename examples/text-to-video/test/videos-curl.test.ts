// The videos API from a script with nothing but curl and sed (scripts/videos-curl.sh, the guide's
// walk-through as one script) against a real server: created, followed to its end, the video and
// its thumbnail downloaded, listed, deleted.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startVideosServer, type VideosServer } from "./videos-helpers.js";

const SCRIPT = fileURLToPath(new URL("../scripts/videos-curl.sh", import.meta.url));
let api: VideosServer;
let out: string;

beforeAll(async () => {
  api = await startVideosServer();
  out = mkdtempSync(join(tmpdir(), "galley-videos-curl-"));
});

afterAll(async () => {
  await api?.close();
  rmSync(out, { recursive: true, force: true });
});

it("makes, downloads, lists and deletes a video with curl alone", async () => {
  // Quotes and a backslash in the prompt: a body the script escaped wrongly would be refused (400).
  const { stdout } = await promisify(execFile)("bash", [SCRIPT, 'a "quoted" fox \\ in snow', out], {
    env: { ...process.env, GALLEY_URL: api.base, VIDEO_SIZE: "64x64", VIDEO_FRAMES: "3", VIDEO_STEPS: "2" },
    timeout: 120_000,
  });
  const id = /^created (video_[0-9a-f]{32})$/m.exec(stdout)?.[1] as string;
  expect(id).toBeDefined();
  expect(stdout).toMatch(/^completed 100%$/m);
  expect(stdout).toContain(`downloaded ${out}/${id}.gif and ${out}/${id}.png`);
  expect(
    readFileSync(join(out, `${id}.gif`))
      .subarray(0, 6)
      .toString("latin1"),
  ).toBe("GIF89a");
  expect(
    readFileSync(join(out, `${id}.png`))
      .subarray(1, 4)
      .toString("latin1"),
  ).toBe("PNG");
  expect(stdout).toMatch(/^listed$/m);
  expect(stdout).toMatch(/^deleted$/m);
  expect(existsSync(join(api.dir, "outputs", id))).toBe(false);
  expect((await fetch(`${api.base}/v1/videos/${id}`)).status).toBe(404);
});
