// The GPU variant (configs/gpu.pbtxt: TorchScript on the PyTorch backend, KIND_GPU) checked on the
// CPU. There is no GPU here, so the test serves a copy of models/ in which each gpu.pbtxt has its
// one `kind: KIND_GPU` replaced by `kind: KIND_CPU` and nothing else, with --model-config-name gpu
// (the selection the real command makes). Each heavy model's TorchScript output is compared with
// the ONNX model's on the same input, and the frame interpolation's with the TypeScript model's
// (served by a second server over models/ itself, which loads only those five), the
// super-resolution one also with the golden from the ncnn weights, and the
// whole pipeline makes a video on the TorchScript models. The variant's text_to_video batches the
// users' denoising steps in its loop (configs/gpu.pbtxt: step_batch_size 8), checked here too. Needs the PyTorch backend (libtorch, see
// docs/guides/pytorch-backend.md), as the server's own PyTorch tests do.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient, type GrpcClient, type InputTensor, tensor } from "@galley/client";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateVideo } from "../src/video.js";

const MODELS = fileURLToPath(new URL("../models", import.meta.url));
const HEAVY = ["text_encoder", "denoiser", "vae_decoder", "super_resolution"];
/** The models on the GPU in the GPU variant (the heavy ones and the frame interpolation); text_to_video has a gpu.pbtxt too, on the CPU. */
const GPU_MODELS = [...HEAVY, "frame_interpolation"];

let copy: string;
let onnx: GalleyServer;
let torch: GalleyServer;
let onnxClient: GrpcClient;
let torchClient: GrpcClient;
const failedToLoad: string[] = [];
const torchLog: string[] = [];

async function start(server: GalleyServer): Promise<GrpcClient> {
  const { grpc, failedModels } = await server.listen();
  failedToLoad.push(...failedModels);
  return createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc?.port}` });
}

beforeAll(async () => {
  copy = mkdtempSync(join(tmpdir(), "galley-t2v-torch-"));
  cpSync(MODELS, copy, { recursive: true });
  for (const name of GPU_MODELS) {
    const file = join(copy, name, "configs", "gpu.pbtxt");
    const text = readFileSync(file, "utf8");
    const cpu = text.replace("kind: KIND_GPU", "kind: KIND_CPU");
    if (cpu === text || cpu.includes("KIND_GPU")) throw new Error(`${name}: expected exactly one 'kind: KIND_GPU'`);
    writeFileSync(file, cpu);
  }
  torch = createServer({
    modelRepositories: [copy],
    modelConfigName: "gpu",
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: (line: string) => torchLog.push(line) }),
  });
  onnx = createServer({
    modelRepositories: [MODELS],
    controlMode: "explicit",
    loadModels: GPU_MODELS,
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  [torchClient, onnxClient] = await Promise.all([start(torch), start(onnx)]);
});

afterAll(async () => {
  await Promise.all([torch?.close(), onnx?.close()]);
  if (copy) rmSync(copy, { recursive: true, force: true });
});

/** A fixed pseudo-random input in [-scale, scale]. */
function values(count: number, scale = 1, seed = 1): Float32Array {
  let state = seed;
  return Float32Array.from({ length: count }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state / 2 ** 32 - 0.5) * 2 * scale;
  });
}

/** The GPU variant's denoiser counts: inferences (users' steps), requests and executions (batches run). */
async function denoiserCounts(): Promise<{ inferences: number; requests: number; executions: number }> {
  const stats = (await torchClient.statistics("denoiser")).modelStats[0];
  return {
    inferences: Number(stats?.inferenceCount ?? 0n),
    requests: Number(stats?.inferenceStats?.success?.count ?? 0n),
    executions: Number(stats?.executionCount ?? 0n),
  };
}

async function both(model: string, inputs: Record<string, InputTensor>, output: string) {
  const [a, b] = await Promise.all([onnxClient.infer(model, { inputs }), torchClient.infer(model, { inputs })]);
  expect(b.output(output).shape).toEqual(a.output(output).shape);
  return { onnx: a.output(output).fp32(), torch: b.output(output).fp32() };
}

function worst(a: Float32Array, b: Float32Array): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs((a[i] ?? 0) - (b[i] ?? 0)));
  return max;
}

describe("the GPU variant's TorchScript models (run on the CPU)", () => {
  it("load from configs/gpu.pbtxt on the PyTorch backend", async () => {
    // A failure here with "PyTorch backend ... libtorch": build @galley/backends-native with libtorch.
    expect(failedToLoad, torchLog.filter((l) => /^E/.test(l)).join("\n")).toEqual([]);
    for (const name of GPU_MODELS) {
      const config = await torchClient.modelConfig(name);
      expect([config.platform, config.defaultModelFilename, config.instanceGroup[0]?.kind]).toEqual([
        "pytorch_libtorch",
        "model.pt",
        2, // KIND_CPU here (KIND_GPU, 1, in the file as shipped)
      ]);
      const reference = await onnxClient.modelConfig(name);
      if (name === "frame_interpolation") expect(reference.backend).toBe("js");
      else expect(reference.platform).toBe("onnxruntime_onnx");
    }
  });

  it("text_encoder: the ONNX model's embedding", async () => {
    const tokens = BigInt64Array.from({ length: 2 * 32 }, (_, i) => BigInt(i % 32 < 12 ? 3 + ((i * 37) % 256) : 0));
    const out = await both("text_encoder", { TOKENS: tensor.int64([2, 32], tokens) }, "EMBEDDING");
    expect(worst(out.torch, out.onnx)).toBeLessThan(1e-4);
  });

  it("denoiser: the ONNX model's noise prediction, batched", async () => {
    const out = await both(
      "denoiser",
      {
        LATENT: tensor.fp32([2, 3, 4, 2, 2], values(2 * 3 * 4 * 2 * 2, 2)),
        TIMESTEP: tensor.fp32([2, 1], [999, 451]),
        TEXT_EMBEDDING: tensor.fp32([2, 32, 64], values(2 * 32 * 64, 1, 2)),
      },
      "NOISE_PRED",
    );
    expect(worst(out.torch, out.onnx)).toBeLessThan(1e-4);
  });

  it("vae_decoder: the ONNX model's frames", async () => {
    const out = await both("vae_decoder", { LATENT: tensor.fp32([3, 4, 2, 2], values(3 * 4 * 2 * 2, 1.5)) }, "IMAGE");
    expect(worst(out.torch, out.onnx)).toBeLessThan(1e-5);
  });

  it("super_resolution: the ONNX model's output and the golden from the ncnn weights", async () => {
    const golden = new Float32Array(
      new Uint8Array(readFileSync(new URL("./fixtures/sr-golden.bin", import.meta.url))).buffer,
    );
    const input = golden.slice(0, 3 * 16 * 16);
    const out = await both("super_resolution", { input: tensor.fp32([1, 3, 16, 16], input) }, "output");
    expect(worst(out.torch, out.onnx)).toBeLessThan(1e-4);
    expect(worst(out.torch, golden.subarray(input.length))).toBeLessThan(1e-3);
  });

  it("frame_interpolation: the TypeScript model's video", async () => {
    // A textured square moving 3 pixels right and 2 down a frame, over a gradient, at a size
    // whose blocks do not divide it (partial blocks at the edges).
    const [n, h, w] = [4, 36, 44];
    const frames = new Float32Array(n * 3 * h * w);
    for (let i = 0; i < n; i++)
      for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++) {
          const inside = x - 3 * i >= 8 && x - 3 * i < 24 && y - 2 * i >= 6 && y - 2 * i < 20;
          const texture = 0.5 + 0.4 * Math.sin(x * 0.7 + y * 0.3);
          for (let c = 0; c < 3; c++)
            frames[((i * 3 + c) * h + y) * w + x] = inside ? texture * (0.6 + 0.2 * c) : (x / w) * 0.5 + (y / h) * 0.3;
        }
    const inputs = { FRAMES: tensor.fp32([n, 3, h, w], frames), FRAME_COUNT: tensor.int32([1], [10]) };
    const [ts, torch] = await Promise.all([
      onnxClient.infer("frame_interpolation", { inputs }),
      torchClient.infer("frame_interpolation", { inputs }),
    ]);
    expect(torch.output("VIDEO").shape).toEqual([10, h, w, 3]);
    const a = ts.output("VIDEO").uint8();
    const b = torch.output("VIDEO").uint8();
    let differing = 0;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) differing++;
    // Equal but for sums taken in another order (a near tie between two motion vectors): 0 or a
    // handful of bytes in the runs made while writing this; a wrong port differs nearly everywhere.
    expect(differing / a.length).toBeLessThan(0.001);
    expect(new Set(b).size).toBeGreaterThan(16);
  });

  it("make a video through the whole pipeline", async () => {
    const options = { prompt: "a red fox running in snow", frames: 5, steps: 4, resolution: "64x64", seed: 3 };
    const video = await generateVideo(torchClient, options);
    expect([video.count, video.height, video.width, video.rgb.length]).toEqual([5, 64, 64, 5 * 64 * 64 * 3]);
    expect(new Set(video.rgb).size).toBeGreaterThan(16); // pictures, not a constant
    const again = await generateVideo(torchClient, options);
    expect(Buffer.from(again.rgb).equals(Buffer.from(video.rgb))).toBe(true);
  });
});

describe("the GPU variant's text_to_video: users' steps batched in the loop (step_batch_size 8)", () => {
  it("runs concurrent users' steps in one denoiser call, each user's video as if alone", async () => {
    const options = (seed: number) => ({ prompt: `user ${seed}`, frames: 3, steps: 8, resolution: "64x64", seed });
    const alone = await generateVideo(torchClient, options(1));
    // A long video runs while three short ones come and go: its loop is in every denoiser call
    // from its first step to its cancellation, so each short video's 8 steps ride in its calls,
    // and the calls are exactly the long video's steps, however the short ones' starts fall.
    const before = await denoiserCounts();
    const controller = new AbortController();
    let started: () => void = () => {};
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    const long = generateVideo(
      torchClient,
      { prompt: "long", frames: 3, steps: 1000, resolution: "64x64", signal: controller.signal },
      (p) => {
        if (p.step === 2) started();
      },
    ).then(
      () => "finished",
      () => "cancelled",
    );
    await Promise.race([running, long]);
    const short = await Promise.all([1, 2, 3].map((seed) => generateVideo(torchClient, options(seed))));
    controller.abort();
    expect(await long).toBe("cancelled");
    const after = await denoiserCounts();
    expect(after.inferences - before.inferences - (after.executions - before.executions)).toBe(3 * 8);
    // One request per user's step, batched in the pipeline's worker (the calls of one turn), not
    // by the denoiser's queue: as many executions as the long video's steps, each carrying all.
    expect(after.requests - before.requests).toBe(after.inferences - before.inferences);
    const first = short[0]?.rgb as Uint8Array;
    let largest = 0;
    for (let i = 0; i < first.length; i++) largest = Math.max(largest, Math.abs((first[i] ?? 0) - (alone.rgb[i] ?? 0)));
    expect(largest).toBeLessThanOrEqual(1); // batched floating point may round one level apart
    expect(Buffer.from(short[1]?.rgb ?? []).equals(Buffer.from(first))).toBe(false);
  });

  it("refuses a step_batch_size that is not a whole number >= 1 (the load fails with why)", async () => {
    // Loaded with a config override on the ONNX server: it is the one in explicit model control.
    const failed = await onnxClient
      .load("text_to_video", {
        config: {
          name: "text_to_video",
          backend: "js",
          max_batch_size: 0,
          model_transaction_policy: { decoupled: true },
          parameters: { step_batch_size: { string_value: "many" } },
        },
      })
      .then(
        () => "",
        (e: unknown) => String((e as Error).message),
      );
    expect(failed).toMatch(
      /^\[invalid_argument\] load failed for model 'text_to_video': .*step_batch_size must be a whole number >= 1, not 'many'/,
    );
  });

  it("goes on with the other users of a batch when one cancels", async () => {
    const controller = new AbortController();
    const options = { prompt: "stays", frames: 3, steps: 12, resolution: "64x64", seed: 5 };
    const alone = await generateVideo(torchClient, options);
    const before = (await denoiserCounts()).inferences;
    const cancelled = generateVideo(
      torchClient,
      { prompt: "leaves", frames: 3, steps: 1000, resolution: "64x64", signal: controller.signal },
      (p) => {
        if (p.step === 4) controller.abort();
      },
    ).then(
      () => "finished",
      () => "cancelled",
    );
    const stays = await generateVideo(torchClient, options);
    expect(await cancelled).toBe("cancelled");
    const steps = (await denoiserCounts()).inferences - before;
    // Its loop stopped within a few steps of the cancel (its steps already in flight may finish):
    // 10–13 after it on a quiet 2-vCPU VM, 21 once under CI's load; uncancelled it would run 1,000.
    expect(steps).toBeGreaterThanOrEqual(12 + 4);
    expect(steps).toBeLessThanOrEqual(12 + 40);
    let largest = 0;
    for (let i = 0; i < stays.rgb.length; i++)
      largest = Math.max(largest, Math.abs((stays.rgb[i] ?? 0) - (alone.rgb[i] ?? 0)));
    expect(largest).toBeLessThanOrEqual(1);
  });
});
