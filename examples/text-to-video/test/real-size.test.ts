// models-real (issue 51): scripts/generate-real-models.py builds the real-size architectures
// (T5-base-size text encoder, DiT-XL/2-size video denoiser, SD-VAE-decoder-size decoder), UNTRAINED.
// Here, with --small (the same architectures at tiny widths and depths, FP32), it writes a
// repository into a temporary folder from models-real's committed configs, a real server (port 0)
// serves it with its CPU configs, and a short video goes through the example's loop and client;
// the models' outputs are checked for shape and finiteness. The full-size parameter counts are
// computed on the meta device (nothing allocated) and checked against the sizes. Baselines
// (i) and (ii) run on the same files, (iii) (the loop in one Python-backend model.py) is served by
// the same server, and (i)'s and (iii)'s videos are compared with the pipeline's.
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createGrpcClient, type GrpcClient, tensor } from "@galley/client";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateVideo, type Progress } from "../src/video.js";

const SCRIPTS = fileURLToPath(new URL("../scripts", import.meta.url));
const run = promisify(execFile);

/** python3 when it imports torch, else Debian's /usr/bin/python3 (as package.json's models:torch). */
function pythonWithTorch(): string {
  try {
    execFileSync("python3", ["-c", "import torch"], { stdio: "ignore", timeout: 60_000 });
    return "python3";
  } catch {
    return "/usr/bin/python3";
  }
}

const python = pythonWithTorch();
let repo: string;
let server: GalleyServer;
let client: GrpcClient;
let generated: { scale: string; untrained: boolean; models: Record<string, { parameters: number }> };
const failedToLoad: string[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  repo = mkdtempSync(join(tmpdir(), "galley-t2v-real-"));
  const { stdout } = await run(
    python,
    [join(SCRIPTS, "generate-real-models.py"), "--small", "--python-model", "--out", repo],
    {
      timeout: 60_000,
    },
  );
  generated = JSON.parse(stdout);
  server = createServer({
    modelRepositories: [repo],
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  const { grpc, failedModels } = await server.listen();
  failedToLoad.push(...failedModels);
  client = createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc?.port}` });
});

afterAll(async () => {
  for (const child of children) child.kill();
  await server?.close();
  if (repo) rmSync(repo, { recursive: true, force: true });
});

describe("models-real --small", () => {
  it("writes every model, labelled UNTRAINED, and the server loads them all", () => {
    expect(failedToLoad).toEqual([]);
    expect(generated.scale).toBe("small");
    expect(generated.untrained).toBe(true);
    for (const name of ["text_encoder", "denoiser", "vae_decoder"]) {
      expect(readFileSync(join(repo, name, "1", "untrained.txt"), "utf8")).toMatch(/^UNTRAINED: /);
      // The label inside the TorchScript file too (an extra file of its archive).
      expect(readFileSync(join(repo, name, "1", "model.pt")).includes("UNTRAINED: ")).toBe(true);
    }
    for (const name of [
      "super_resolution",
      "frame_interpolation",
      "tokenizer",
      "preflight",
      "text_to_video",
      "text_to_video_python",
    ])
      expect(existsSync(join(repo, name, "1"))).toBe(true);
  });

  it("text_encoder and denoiser answer finite tensors of the interface's shapes", async () => {
    const encoded = await client.infer("text_encoder", {
      inputs: { TOKENS: tensor.int64([2, 77], new BigInt64Array(154).fill(5n)) },
    });
    const embedding = encoded.output("EMBEDDING");
    expect(embedding.shape).toEqual([2, 77, 64]);
    expect(embedding.fp32().every(Number.isFinite)).toBe(true);
    const latent = Float32Array.from({ length: 2 * 16 * 4 * 8 * 8 }, (_, i) => Math.sin(i));
    const denoised = await client.infer("denoiser", {
      inputs: {
        LATENT: tensor.fp32([2, 16, 4, 8, 8], latent),
        TIMESTEP: tensor.fp32([2, 1], [900, 10]),
        TEXT_EMBEDDING: tensor.fp32([2, 77, 64], embedding.fp32()),
      },
    });
    const noise = denoised.output("NOISE_PRED");
    expect(noise.shape).toEqual([2, 16, 4, 8, 8]);
    const values = noise.fp32();
    expect(values.every(Number.isFinite)).toBe(true);
    expect(values.some((v) => v !== 0)).toBe(true);
  });

  it("makes a video through text_to_video (256x256: 8x8 latents, 3 frames, 3 steps)", async () => {
    const seen: Progress[] = [];
    const video = await generateVideo(
      client,
      { prompt: "a red fox running in snow", resolution: "256x256", frames: 3, steps: 3, previewEvery: 2, seed: 7 },
      (p) => seen.push(p),
    );
    expect([video.count, video.height, video.width]).toEqual([3, 256, 256]);
    expect(video.rgb.length).toBe(3 * 256 * 256 * 3);
    expect(new Set(video.rgb).size).toBeGreaterThan(1);
    expect(seen.map((p) => p.stage)).toEqual(["denoise", "denoise", "denoise", "decode", "done"]);
    // Previews are the VAE's output for one keyframe: 8x the 8x8 latent.
    const preview = seen.find((p) => p.preview)?.preview;
    expect([preview?.height, preview?.width]).toEqual([64, 64]);
  });

  it("baseline (i) serves the same video as Galley's loop (the same files, noise and DDIM)", async () => {
    const child = spawn(
      python,
      [join(SCRIPTS, "baseline-http.py"), "serve", "--repo", repo, "--port", "0", "--device", "cpu"],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    children.push(child);
    const port = await new Promise<number>((resolve, reject) => {
      let text = "";
      child.stdout?.on("data", (chunk: Buffer) => {
        text += chunk.toString();
        const match = /http:\/\/[\d.]+:(\d+)/.exec(text);
        if (match) resolve(Number(match[1]));
      });
      child.on("exit", (code) => reject(new Error(`baseline-http.py exited ${code}`)));
    });
    const request = { prompt: "a red fox running in snow", resolution: "256x256", frames: 3, steps: 3, seed: 11 };
    const response = await fetch(`http://127.0.0.1:${port}/video`, { method: "POST", body: JSON.stringify(request) });
    expect(response.status).toBe(200);
    expect(response.headers.get("X-Video-Shape")).toBe("3,256,256,3");
    const bytes = new Uint8Array(await response.arrayBuffer());
    const video = await generateVideo(client, request);
    expect(bytes.length).toBe(video.rgb.length);
    // Galley's loop updates in doubles, the baseline in float32 tensors: a level or so apart.
    let sum = 0;
    for (let i = 0; i < bytes.length; i++) sum += Math.abs((bytes[i] as number) - (video.rgb[i] as number));
    expect(sum / bytes.length).toBeLessThan(1);
    child.kill();
  });

  it("the GPU config's loop (tensors kept between calls, DDIM in the ddim model) makes the CPU config's video", async () => {
    // configs/gpu.pbtxt everywhere, KIND_GPU -> KIND_CPU: on the CPU the GPU preference gives bytes,
    // and everything else is the GPU's path: the text encoder and the steps called directly from
    // the loop's worker, each turn's calls one batch, the update in `ddim`.
    const copy = mkdtempSync(join(tmpdir(), "galley-t2v-real-gpu-"));
    try {
      cpSync(repo, copy, { recursive: true });
      for (const name of readdirSync(copy)) {
        const file = join(copy, name, "configs", "gpu.pbtxt");
        if (existsSync(file)) writeFileSync(file, readFileSync(file, "utf8").replaceAll("KIND_GPU", "KIND_CPU"));
      }
      const gpu = createServer({
        modelRepositories: [copy],
        modelConfigName: "gpu",
        http: false,
        grpc: { host: "127.0.0.1", port: 0 },
        metrics: false,
        log: createLogger({ write: () => {} }),
      });
      try {
        const { grpc, failedModels } = await gpu.listen();
        expect(failedModels).toEqual([]);
        const gpuClient = createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc?.port}` });
        const request = { prompt: "a red fox running in snow", resolution: "256x256", frames: 3, steps: 4, seed: 17 };
        const seen: Progress[] = [];
        const [alone, ...together] = await Promise.all([
          generateVideo(gpuClient, { ...request, previewEvery: 2 }, (p) => seen.push(p)),
          generateVideo(gpuClient, { ...request, seed: 18 }),
          generateVideo(gpuClient, { ...request, seed: 19 }),
        ]);
        const reference = await generateVideo(client, request);
        // The update in float32 tensors against the loop's doubles: a level or so apart.
        let sum = 0;
        for (let i = 0; i < reference.rgb.length; i++)
          sum += Math.abs((reference.rgb[i] as number) - (alone?.rgb[i] as number));
        expect(sum / reference.rgb.length).toBeLessThan(1);
        expect(Buffer.from(together[0]?.rgb ?? []).equals(Buffer.from(alone?.rgb ?? []))).toBe(false);
        expect(seen.filter((p) => p.preview).map((p) => p.step)).toEqual([2, 4]);
        // Every update of the three users' 4 steps went through ddim (how the users' steps fall
        // into batches depends on when each loop starts: bls-direct's tests hold the batching).
        const stats = (await gpuClient.statistics("ddim")).modelStats[0];
        expect(Number(stats?.inferenceCount)).toBe(12);
        expect(Number(stats?.inferenceStats?.success?.count)).toBe(12);
      } finally {
        await gpu.close();
      }
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  it("baseline (iii), the loop in one Python-backend model.py, makes the pipeline's video", async () => {
    const request = { prompt: "a red fox running in snow", resolution: "256x256", frames: 3, steps: 3, seed: 13 };
    const reply = await client.infer("text_to_video_python", {
      inputs: {
        PROMPT: tensor.bytes([1], [request.prompt]),
        RESOLUTION: tensor.bytes([1], [request.resolution]),
        FRAMES: tensor.int32([1], [request.frames]),
        STEPS: tensor.int32([1], [request.steps]),
        SEED: tensor.int32([1], [request.seed]),
      },
    });
    expect(reply.output("VIDEO").shape).toEqual([3, 256, 256, 3]);
    const bytes = reply.output("VIDEO").uint8();
    const video = await generateVideo(client, request);
    let sum = 0;
    for (let i = 0; i < bytes.length; i++) sum += Math.abs((bytes[i] as number) - (video.rgb[i] as number));
    expect(sum / bytes.length).toBeLessThan(1);
  });

  it("baseline (ii) batches 3 users' steps (at most 2 a call)", async () => {
    const { stdout } = await run(
      python,
      [
        join(SCRIPTS, "baseline-batched.py"),
        ...["--repo", repo, "--device", "cpu", "--users", "3", "--max-batch", "2"],
        ...["--resolution", "256x256", "--frames", "3", "--steps", "3"],
      ],
      { timeout: 60_000 },
    );
    const result = JSON.parse(stdout.trim());
    expect(result).toMatchObject({ users: 3, keyframes: 2, tokens_per_sample: 32, average_batch: 1.5 });
    expect(result.video_shape).toEqual([3, 256, 256, 3]);
    expect(result.videos_per_min).toBeGreaterThan(0);
  });
});

describe("real-benchmark.py on the small models", () => {
  it("runs baselines (i) and (ii) and Galley's bench (iv), and reads Galley's rows by name, first step too", async () => {
    const out = mkdtempSync(join(tmpdir(), "galley-t2v-bench-"));
    try {
      const root = fileURLToPath(new URL("../../..", import.meta.url));
      const bench = `${process.execPath} --import tsx ${join(root, "bench", "text-to-video.ts")}`;
      await run(
        python,
        [
          join(SCRIPTS, "real-benchmark.py"),
          ...["--python", python, "--small", "--device", "cpu", "--repo", join(out, "repo"), "--out", out],
          ...["--resolutions", "256x256", "--users", "1", "--frames", "3", "--steps", "3", "--warmup", "0"],
          ...["--bench", bench, "--step-by-step", "--trace", "--timeout", "150"],
        ],
        { timeout: 240_000, cwd: root },
      );
      const result = JSON.parse(readFileSync(join(out, "t2v-real.json"), "utf8"));
      expect(result.failures).toEqual([]);
      const row = (which: string) => result.runs.find((r: { which: string }) => r.which === which);
      for (const which of ["i", "ii", "iv", "galley step by step"])
        expect(row(which)?.videos_per_min).toBeGreaterThan(0);
      const iv = row("iv");
      expect(iv.denoiser_batch).toBe(1);
      // The first step's result comes before the video: after the prompt's encoding, well before the end.
      expect(iv.first_step_ms).toBeGreaterThan(0);
      expect(iv.first_step_ms).toBeLessThan(iv.p50_ms);
      expect(row("ii").first_step_s).toBeGreaterThan(0);
      for (const which of ["i", "ii", "iv"]) expect(row(which).cpu_ms_per_video).toBeGreaterThan(0);
      // The traced run at 1 user: one video, 3 steps, 3 denoiser calls, their average period.
      const steps = result.steps["256x256"];
      expect(steps.calls).toBe(3);
      expect(steps.step_period_ms).toBeGreaterThan(steps.infer_ms);
      expect(steps.request_ms).toBeGreaterThanOrEqual(steps.infer_ms);
      // Every row knows when its user count ran, for the GPU's samples to be split by (none here:
      // no nvidia-smi on this machine).
      for (const which of ["i", "ii", "iv"]) {
        const [[start, end]] = row(which).windows;
        expect(end).toBeGreaterThan(start);
        expect(start).toBeGreaterThan(Date.now() / 1000 - 600);
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 300_000);
});

describe("real-benchmark.py's --variants", () => {
  it("refuses a variant it does not know before it generates anything", async () => {
    const out = mkdtempSync(join(tmpdir(), "galley-t2v-variants-"));
    try {
      const failed = await run(
        python,
        [
          join(SCRIPTS, "real-benchmark.py"),
          "--small",
          "--repo",
          join(out, "repo"),
          "--out",
          out,
          "--variants",
          "ii,v",
        ],
        { timeout: 60_000 },
      ).then(
        () => "",
        (error: Error) => error.message,
      );
      expect(failed).toContain("--variants: a comma-separated list of i, ii, iii, iv, not 'ii,v'");
      expect(existsSync(join(out, "repo"))).toBe(false);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});

describe("real-benchmark.py's GPU samples per user count", () => {
  it("reads nvidia-smi's stamped samples and averages those inside a row's windows", async () => {
    const script = [
      "import importlib.util, json, sys",
      "spec = importlib.util.spec_from_file_location('rb', sys.argv[1])",
      "rb = importlib.util.module_from_spec(spec); spec.loader.exec_module(rb)",
      "samples = [(1.0, 10, 100), (2.0, 50, 300), (3.0, 90, 200), (4.0, 0, 900)]",
      "print(json.dumps([rb.window_costs(samples, [[1.5, 3.0]]), rb.window_costs(samples, [[0, 1], [3.5, 5]]),",
      "  rb.window_costs(samples, [[5, 6]]), rb.window_costs(samples, None)]))",
      "import time; t = rb.parse_sample('2026/12/07 10:40:04.250, 35, 5729')",
      "print(json.dumps([round(t[0] - time.mktime((2026, 12, 7, 10, 40, 4, 0, 0, -1)), 3), t[1], t[2],",
      "  rb.parse_sample('[N/A], 1, 2'), rb.parse_sample('no such GPU')]))",
    ].join("\n");
    const { stdout } = await run(python, ["-c", script, join(SCRIPTS, "real-benchmark.py")], { timeout: 60_000 });
    const [costs, parsed] = stdout.trim().split("\n");
    // nvidia-smi's own timestamp (local time), to the millisecond; lines that are not samples: none.
    expect(JSON.parse(parsed as string)).toEqual([0.25, 35, 5729, null, null]);
    expect(JSON.parse(costs as string)).toEqual([
      { gpu_util_mean: 70, gpu_mem_peak_mib: 300 },
      { gpu_util_mean: 5, gpu_mem_peak_mib: 900 },
      {},
      { gpu_util_mean: 37.5, gpu_mem_peak_mib: 900 },
    ]);
  });
});

describe("generate-real-models.py --counts (full size, meta device)", () => {
  it("counts the issue's sizes: DiT-XL/2 ~450 M, T5-base encoder ~110 M, SD VAE decoder ~50 M", async () => {
    const { stdout } = await run(python, [join(SCRIPTS, "generate-real-models.py"), "--counts"], { timeout: 60_000 });
    const { parameters, tokens } = JSON.parse(stdout);
    const within = (value: number, expected: number, share: number) =>
      expect(Math.abs(value - expected) / expected).toBeLessThan(share);
    within(parameters.denoiser.full, 450e6, 0.03);
    within(parameters.text_encoder.full, 110e6, 0.03);
    within(parameters.vae_decoder.full, 50e6, 0.03);
    expect(Object.values(tokens)).toEqual([256, 1024, 4096]);
  });
});
