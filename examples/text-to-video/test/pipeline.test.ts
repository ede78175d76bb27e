// The pipeline end to end on a real server (port 0) over models/: the tiny resolution (64x64),
// shapes and frame counts, the progress and preview stream, the GIF (decoded with omggif, a
// library independent of the encoder), preflight's refusals, cancellation stopping the denoising
// loop (seen in the denoiser's statistics), the real-frames entry point, the CLI's errors, and
// README.md's TypeScript samples (each ```ts block runs as a module against this server, importing
// this package's source under its published name; the files it writes go to a temporary folder).
// The samples share this file's server: one more server would add a quarter to the suite's time.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { ConnectError } from "@connectrpc/connect";
import type { GrpcClient } from "@galley/client";
import type { GalleyServer } from "@galley/server";
import { GifReader } from "omggif";
import { tsImport } from "tsx/esm/api";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cartoonImage } from "../scripts/test-image.js";
import { runCli } from "../src/cli.js";
import { encodeGif } from "../src/gif.js";
import { generateVideo, type Progress, upscaleVideo } from "../src/video.js";
import { startExampleServer } from "./example-server.js";

let server: GalleyServer;
let client: GrpcClient;
let address: string;

beforeAll(async () => {
  let url: string;
  ({ server, client, url } = await startExampleServer());
  address = url.replace("http://", "");
});

afterAll(async () => {
  await server?.close();
});

async function denoiserRequests(): Promise<number> {
  const stats = await client.statistics("denoiser");
  return Number(stats.modelStats[0]?.inferenceCount ?? 0n);
}

function capture() {
  let text = "";
  return {
    write: (t: string) => (text += t),
    get text() {
      return text;
    },
  };
}

describe("text_to_video", () => {
  it("streams every step with previews and answers frames x 64 x 64 x 3", async () => {
    const seen: Progress[] = [];
    const video = await generateVideo(
      client,
      { prompt: "a red fox running in snow", frames: 5, steps: 4, resolution: "64x64", previewEvery: 2 },
      (p) => seen.push(p),
    );
    expect(seen.map((p) => `${p.stage} ${p.step}/${p.total}`)).toEqual([
      "denoise 1/6",
      "denoise 2/6",
      "denoise 3/6",
      "denoise 4/6",
      "decode 5/6",
      "done 6/6",
    ]);
    expect(
      seen.filter((p) => p.preview).map((p) => [p.step, p.preview?.count, p.preview?.height, p.preview?.width]),
    ).toEqual([
      [2, 1, 16, 16],
      [4, 1, 16, 16],
    ]);
    expect([video.count, video.height, video.width, video.rgb.length]).toEqual([5, 64, 64, 5 * 64 * 64 * 3]);
    expect(video.blocked).toBe(false);

    const gif = new GifReader(encodeGif(video));
    expect([gif.numFrames(), gif.width, gif.height]).toEqual([5, 64, 64]);
    const rgba = new Uint8Array(64 * 64 * 4);
    gif.decodeAndBlitFrameRGBA(4, rgba);
    let error = 0;
    for (let p = 0; p < 64 * 64; p++)
      for (let c = 0; c < 3; c++)
        error += Math.abs((rgba[p * 4 + c] ?? 0) - (video.rgb[(4 * 64 * 64 + p) * 3 + c] ?? 0));
    expect(error / (64 * 64 * 3)).toBeLessThan(8); // a 256-colour palette per frame
  });

  it("leaves out step responses within PROGRESS_INTERVAL_MS of the last one (never the first)", async () => {
    const seen: string[] = [];
    await generateVideo(
      client,
      { prompt: "a quiet one", frames: 3, steps: 6, resolution: "64x64", progressIntervalMs: 600_000 },
      (p) => seen.push(`${p.stage} ${p.step}/${p.total}`),
    );
    expect(seen).toEqual(["denoise 1/8", "decode 7/8", "done 8/8"]);
  });

  it("makes the same video from the same prompt and seed", async () => {
    const options = { prompt: "waves", frames: 3, steps: 2, resolution: "64x64", seed: 7 };
    const a = await generateVideo(client, options);
    const b = await generateVideo(client, options);
    expect(Buffer.from(a.rgb).equals(Buffer.from(b.rgb))).toBe(true);
  });

  it("refuses what preflight refuses, before any model runs", async () => {
    const before = await denoiserRequests();
    const refusal = (options: Parameters<typeof generateVideo>[1]) =>
      generateVideo(client, options).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    // A streamed error has a message and no code (ModelStreamInferResponse.error_message).
    const empty = await refusal({ prompt: "  " });
    expect(empty?.rawMessage).toMatch(/the prompt is empty/);
    const resolution = await refusal({ prompt: "a cat", resolution: "100x100" });
    expect(resolution?.rawMessage).toMatch(/resolution '100x100' is not supported; use one of 64x64, 128x128, 256x256/);
    const frames = await refusal({ prompt: "a cat", frames: 99 });
    expect(frames?.rawMessage).toMatch(/frames must be between 1 and 32/);
    expect(await denoiserRequests()).toBe(before);
  });

  it("answers a default frame for a blocked prompt", async () => {
    const video = await generateVideo(client, { prompt: "a blocked-example-term", resolution: "64x64" });
    expect([video.blocked, video.count, video.height, video.width, video.rgb[0]]).toEqual([true, 1, 64, 64, 128]);
  });

  it("stops the denoising loop when the client cancels", async () => {
    const controller = new AbortController();
    const cancelled = generateVideo(
      client,
      { prompt: "a long one", frames: 3, steps: 1000, resolution: "64x64", signal: controller.signal },
      (p) => {
        if (p.step === 3) controller.abort();
      },
    );
    await expect(cancelled).rejects.toThrow();
    const afterCancel = await denoiserRequests();
    // A 3-step video now: had the cancelled loop gone on, its steps would be counted here too
    // (one step that was already in flight when the cancel arrived may still finish).
    await generateVideo(client, { prompt: "short", frames: 3, steps: 3, resolution: "64x64" });
    const added = (await denoiserRequests()) - afterCancel;
    expect(added).toBeGreaterThanOrEqual(3);
    expect(added).toBeLessThanOrEqual(4);
  });
});

describe("upscale_video (real frames)", () => {
  it("upscales 4x and interpolates between frames", async () => {
    const size = 16;
    const image = cartoonImage(size);
    const rgb = new Uint8Array(2 * size * size * 3);
    for (let f = 0; f < 2; f++)
      for (let y = 0; y < size; y++)
        for (let x = 0; x < size; x++)
          for (let c = 0; c < 3; c++) {
            const sx = Math.min(size - 1, x + f * 2); // the second frame: the scene moved 2 pixels left
            rgb[((f * size + y) * size + x) * 3 + c] = Math.round((image[(c * size + y) * size + sx] ?? 0) * 255);
          }
    const video = await upscaleVideo(client, { count: 2, height: size, width: size, rgb }, 3);
    expect([video.count, video.height, video.width]).toEqual([3, 64, 64]);
  });

  it("with onProgress: frame by frame, pair by pair, the same frames as the ensemble's", async () => {
    const size = 8;
    const rgb = new Uint8Array(3 * size * size * 3).map((_, i) => (i * 37) % 251);
    const input = { count: 3, height: size, width: size, rgb };
    const seen: string[] = [];
    const whole = await upscaleVideo(client, input, 5);
    const stepwise = await upscaleVideo(client, input, 5, undefined, (p) =>
      seen.push(`${p.stage} ${p.done}/${p.total}`),
    );
    expect(seen).toEqual([
      "upscale 0/5",
      "upscale 1/5",
      "upscale 2/5",
      "upscale 3/5",
      "interpolate 4/5",
      "interpolate 5/5",
    ]);
    expect([stepwise.count, stepwise.height, stepwise.width]).toEqual([5, 32, 32]);
    expect(Buffer.from(stepwise.rgb).equals(Buffer.from(whole.rgb))).toBe(true);
    // Output frames that do not fall evenly between the pairs: one interpolation call.
    seen.length = 0;
    const uneven = await upscaleVideo(client, input, 4, undefined, (p) => seen.push(`${p.stage} ${p.done}/${p.total}`));
    expect(seen.at(-1)).toBe("interpolate 4/4");
    expect(Buffer.from(uneven.rgb).equals(Buffer.from((await upscaleVideo(client, input, 4)).rgb))).toBe(true);
  });
});

describe("galley-video", () => {
  it("says what is wrong with its arguments (exit 2)", async () => {
    const stderr = capture();
    expect(await runCli(["--frames", "two", "a fox"], { stdout: capture(), stderr })).toBe(2);
    expect(stderr.text).toMatch(/--frames must be a whole number >= 1, not 'two'/);
    expect(await runCli([], { stdout: capture(), stderr })).toBe(2);
  });

  it("reports a rejected prompt and a missing server (exit 1)", async () => {
    const stderr = capture();
    expect(await runCli(["", "-u", address], { stdout: capture(), stderr })).toBe(1);
    expect(stderr.text).toMatch(/the server rejected the request: the prompt is empty/);
    const missing = capture();
    expect(await runCli(["a fox", "-u", "127.0.0.1:9"], { stdout: capture(), stderr: missing })).toBe(1);
    expect(missing.text).toMatch(/cannot reach a server at 127.0.0.1:9/);
  });

  it("--input: shows each frame and pair as it is done", async () => {
    const size = 8;
    const rgb = new Uint8Array(2 * size * size * 3).map((_, i) => (i * 53) % 251);
    const gif = fileURLToPath(new URL(`./.in-${process.pid}.gif`, import.meta.url));
    const out = fileURLToPath(new URL(`./.up-${process.pid}.gif`, import.meta.url));
    writeFileSync(gif, encodeGif({ count: 2, height: size, width: size, rgb }));
    try {
      const stdout = capture();
      expect(await runCli(["--input", gif, "-u", address, "-o", out], { stdout, stderr: capture() })).toBe(0);
      expect(stdout.text.split("\n").map((l) => l.replace(/ [\d.]+s/g, " Ts"))).toEqual([
        "upscaling 2 frames of 8x8 to 3 frames of 32x32",
        "step 0/3 upscale Ts stage ETA --",
        "step 1/3 upscale Ts stage ETA Ts",
        "step 2/3 upscale Ts",
        "step 3/3 interpolate Ts",
        `wrote ${out}: 3 frames, 32x32, in Ts`,
        "",
      ]);
    } finally {
      rmSync(gif, { force: true });
      rmSync(out, { force: true });
    }
  });

  it("prints plain progress lines when stdout is not a terminal", async () => {
    const stdout = capture();
    const out = fileURLToPath(new URL(`./.out-${process.pid}.gif`, import.meta.url));
    try {
      const code = await runCli(
        ["a fox", "-u", address, "--frames", "3", "--steps", "2", "--resolution", "64x64", "-o", out],
        {
          stdout,
          stderr: capture(),
        },
      );
      expect(code).toBe(0);
      expect(stdout.text).toMatch(/^step 1\/4 denoise .*ETA/m);
      expect(stdout.text).toMatch(/wrote .*: 3 frames, 64x64/);
    } finally {
      (await import("node:fs")).rmSync(out, { force: true });
    }
  });
});

describe("README.md", () => {
  const readme = readFileSync(fileURLToPath(new URL("../README.md", import.meta.url)), "utf8");
  const source = fileURLToPath(new URL("../src/index.ts", import.meta.url));
  const samples = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m, i) => ({ i, code: m[1] ?? "" }));

  it("has a TypeScript sample", () => {
    expect(samples.length).toBeGreaterThanOrEqual(1);
  });

  it.each(samples)("sample $i runs and writes its GIF", async ({ code }) => {
    const dir = mkdtempSync(fileURLToPath(new URL("./.readme-", import.meta.url)));
    try {
      const written = [...code.matchAll(/writeFileSync\("([^"]+)"/g)].map((m) => m[1] ?? "");
      let text = code
        .replaceAll('from "@galley/example-text-to-video"', `from ${JSON.stringify(source)}`)
        .replaceAll("http://localhost:8001", `http://${address}`);
      for (const name of written) text = text.replaceAll(`"${name}"`, JSON.stringify(join(dir, name)));
      writeFileSync(join(dir, "sample.mts"), text);
      await tsImport(pathToFileURL(join(dir, "sample.mts")).href, import.meta.url);
      expect(written.length).toBeGreaterThan(0);
      for (const name of written) {
        expect(existsSync(join(dir, name))).toBe(true);
        const gif = new GifReader(new Uint8Array(readFileSync(join(dir, name))));
        expect(gif.numFrames()).toBeGreaterThan(1);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
