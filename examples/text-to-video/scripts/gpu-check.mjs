// GPU check of the text-to-video example's GPU variant (configs/gpu.pbtxt: TorchScript on the
// PyTorch backend, KIND_GPU), for a machine with a GPU and a CUDA libtorch build of
// @galley/backends-native. Plain Node, over the built server and client (dist/):
//
//   npm run build -w @galley/backends-native   # with a CUDA libtorch (docs/guides/pytorch-backend.md)
//   (cd packages/server && npx tsc -p tsconfig.build.json) && (cd packages/client && npx tsc -p tsconfig.build.json)
//   node examples/text-to-video/scripts/gpu-check.mjs            # --cpu: the same on the CPU (KIND_CPU)
// On the lent H200 it runs from a bundle: packages/backends-native/test/gpu/device-run.sh.
//
// 1. serves models/ with --model-config-name gpu (all ten models; the four heavy ones on the GPU)
//    and, beside it, the four ONNX models on the CPU;
// 2. compares each heavy model's output, five calls (with CUDA graphs: three eager, a capture and
//    a replay), with a reference on a fixed input (relative to the output's largest value; cuDNN
//    may use TF32, so the bound is 1e-2 rather than the CPU test's 1e-4):
//    ONNX Runtime's where onnxruntime-node is installed, else the same TorchScript files on the CPU
//    (KIND_CPU; test/torch-variant.test.ts ties those to ONNX Runtime within 1e-4) — the GPU
//    machine has no room for onnxruntime-node;
// 3. makes one video through the whole pipeline on the GPU variant, then 8 users x 2 videos at
//    once, and reports videos per minute and the denoiser's average batch;
// 4. prints a JSON summary; exit code 1 when a model fails to load or a comparison fails.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient, tensor } from "@galley/client";
import { createLogger, createServer } from "@galley/server";

// --models=<dir>: where models/ is, when this script runs from a bundle elsewhere.
const MODELS =
  process.argv.find((a) => a.startsWith("--models="))?.slice(9) ?? fileURLToPath(new URL("../models", import.meta.url));
const HEAVY = ["text_encoder", "denoiser", "vae_decoder", "super_resolution"];
/** The models on the GPU in the GPU variant (the heavy ones and the frame interpolation); text_to_video has a gpu.pbtxt too, on the CPU. */
const GPU_MODELS = [...HEAVY, "frame_interpolation"];
const cpu = process.argv.includes("--cpu");

/** A copy of models/ whose gpu.pbtxt files have their one KIND_GPU made KIND_CPU (as test/torch-variant.test.ts). */
function cpuCopy() {
  const copy = mkdtempSync(join(tmpdir(), "galley-t2v-gpu-check-"));
  cpSync(MODELS, copy, { recursive: true });
  for (const name of GPU_MODELS) {
    const file = join(copy, name, "configs", "gpu.pbtxt");
    writeFileSync(file, readFileSync(file, "utf8").replace("kind: KIND_GPU", "kind: KIND_CPU"));
  }
  return copy;
}
// --reference=torch: the TorchScript reference even where onnxruntime-node is installed.
const onnxAvailable =
  !process.argv.includes("--reference=torch") &&
  (await import("onnxruntime-node").then(
    () => true,
    () => false,
  ));
const copies = [];
const repository = cpu ? cpuCopy() : MODELS;
if (cpu) copies.push(repository);
const referenceRepository = onnxAvailable ? MODELS : cpuCopy();
if (!onnxAvailable) copies.push(referenceRepository);

const errors = [];
const torchServer = createServer({
  modelRepositories: [repository],
  modelConfigName: "gpu",
  http: false,
  grpc: { host: "127.0.0.1", port: 0 },
  metrics: false,
  log: createLogger({ write: (line) => (/^E/.test(line) ? errors.push(line.trim()) : undefined) }),
});
const referenceServer = createServer({
  modelRepositories: [referenceRepository],
  ...(onnxAvailable ? {} : { modelConfigName: "gpu" }),
  controlMode: "explicit",
  loadModels: GPU_MODELS,
  http: false,
  grpc: { host: "127.0.0.1", port: 0 },
  metrics: false,
  log: createLogger({ write: () => {} }),
});
const summary = {
  variant: cpu ? "gpu configs with KIND_CPU" : "gpu",
  reference: onnxAvailable ? "ONNX Runtime" : "TorchScript on the CPU",
  ok: true,
  models: {},
  pipeline: {},
};
const fail = (what) => {
  summary.ok = false;
  summary.failure = [...(summary.failure ?? []), what];
};

try {
  const [t, o] = await Promise.all([torchServer.listen(), referenceServer.listen()]);
  if (t.failedModels.length > 0) {
    fail(`models that did not load: ${t.failedModels.join(", ")}`);
    summary.loadErrors = errors;
    throw new Error("load");
  }
  const torch = createGrpcClient({ baseUrl: `http://127.0.0.1:${t.grpc.port}` });
  const reference = createGrpcClient({ baseUrl: `http://127.0.0.1:${o.grpc.port}` });

  let state = 1;
  const values = (count, scale) =>
    Float32Array.from({ length: count }, () => {
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      return (state / 2 ** 32 - 0.5) * 2 * scale;
    });
  const cases = {
    text_encoder: [
      {
        TOKENS: tensor.int64(
          [2, 32],
          BigInt64Array.from({ length: 64 }, (_, i) => BigInt(i % 32 < 12 ? 3 + ((i * 37) % 256) : 0)),
        ),
      },
      "EMBEDDING",
    ],
    denoiser: [
      {
        LATENT: tensor.fp32([4, 4, 4, 4, 4], values(4 * 4 * 4 * 4 * 4, 2)),
        TIMESTEP: tensor.fp32([4, 1], [999, 700, 451, 20]),
        TEXT_EMBEDDING: tensor.fp32([4, 32, 64], values(4 * 32 * 64, 1)),
      },
      "NOISE_PRED",
    ],
    vae_decoder: [{ LATENT: tensor.fp32([8, 4, 4, 4], values(8 * 4 * 4 * 4, 1.5)) }, "IMAGE"],
    super_resolution: [
      {
        input: tensor.fp32(
          [4, 3, 32, 32],
          values(4 * 3 * 32 * 32, 0.5).map((v) => v + 0.5),
        ),
      },
      "output",
    ],
  };
  // Five calls each: with CUDA graphs on (the GPU configs), the first three run eagerly, the 4th
  // is captured and the 5th replays it; every one is compared.
  for (const [model, [inputs, name]] of Object.entries(cases)) {
    const a = (await reference.infer(model, { inputs })).output(name);
    const x = a.fp32();
    let worst = 0;
    let largest = 0;
    let firstMs = 0;
    let lastMs = 0;
    let shape = [];
    for (let call = 0; call < 5; call++) {
      const started = performance.now();
      const b = (await torch.infer(model, { inputs })).output(name);
      lastMs = performance.now() - started;
      if (call === 0) firstMs = lastMs;
      shape = b.shape;
      if (JSON.stringify(a.shape) !== JSON.stringify(b.shape)) fail(`${model}: shape ${b.shape} against ${a.shape}`);
      const y = b.fp32();
      for (let i = 0; i < x.length; i++) {
        worst = Math.max(worst, Math.abs(x[i] - y[i]));
        largest = Math.max(largest, Math.abs(x[i]));
      }
    }
    const relative = worst / (largest || 1);
    summary.models[model] = {
      shape,
      maxAbsDiff: worst,
      relative,
      firstCallMs: Math.round(firstMs),
      fifthCallMs: Number(lastMs.toFixed(2)),
    };
    if (!(relative < 1e-2)) fail(`${model}: differs from ${summary.reference} (relative ${relative})`);
  }

  {
    // The interpolation's video, byte for byte but near ties between two motion vectors.
    const [n, h, w] = [6, 128, 128];
    const frames = new Float32Array(n * 3 * h * w);
    for (let i = 0; i < n; i++)
      for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++) {
          const inside = x - 4 * i >= 30 && x - 4 * i < 70 && y - 3 * i >= 20 && y - 3 * i < 60;
          const texture = 0.5 + 0.4 * Math.sin(x * 0.7 + y * 0.3);
          for (let c = 0; c < 3; c++)
            frames[((i * 3 + c) * h + y) * w + x] = inside ? texture * (0.6 + 0.2 * c) : (x / w) * 0.5 + (y / h) * 0.3;
        }
    const inputs = { FRAMES: tensor.fp32([n, 3, h, w], frames), FRAME_COUNT: tensor.int32([1], [16]) };
    const started = performance.now();
    const b = (await torch.infer("frame_interpolation", { inputs })).output("VIDEO");
    const ms = performance.now() - started;
    const a = (await reference.infer("frame_interpolation", { inputs })).output("VIDEO");
    const [x, y] = [a.uint8(), b.uint8()];
    let differing = 0;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) differing++;
    summary.models.frame_interpolation = { shape: b.shape, differingBytes: differing, firstCallMs: Math.round(ms) };
    if (JSON.stringify(a.shape) !== JSON.stringify(b.shape) || differing / x.length >= 0.001)
      fail(`frame_interpolation: ${differing} of ${x.length} bytes differ from the reference`);
  }

  const video = async (client, prompt) => {
    for await (const r of client.streamInfer("text_to_video", {
      inputs: {
        PROMPT: tensor.bytes([1], [prompt]),
        RESOLUTION: tensor.bytes([1], ["128x128"]),
        FRAMES: tensor.int32([1], [16]),
        STEPS: tensor.int32([1], [20]),
        PROGRESS_INTERVAL_MS: tensor.int32([1], [100]),
      },
    }))
      if (r.output("STAGE").strings()[0] === "done") return r.output("VIDEO").shape;
    throw new Error("no video");
  };
  const first = performance.now();
  summary.pipeline.shape = await video(torch, "a red fox running in snow");
  summary.pipeline.oneVideoMs = Math.round(performance.now() - first);
  const count = async () => {
    const s = (await torch.statistics("denoiser")).modelStats[0];
    return [Number(s.inferenceCount), Number(s.executionCount)];
  };
  const before = await count();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: 8 }, async (_, u) => {
      const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${t.grpc.port}` });
      for (let v = 0; v < 2; v++) await video(client, `user ${u} video ${v}`);
    }),
  );
  const after = await count();
  summary.pipeline.eightUsersVideosPerMinute = Math.round((16 * 60_000) / (performance.now() - started));
  summary.pipeline.denoiserAverageBatch = (after[0] - before[0]) / (after[1] - before[1] || 1);
  if (JSON.stringify(summary.pipeline.shape) !== JSON.stringify([16, 128, 128, 3]))
    fail(`pipeline: video shape ${summary.pipeline.shape}`);
} catch (error) {
  if (error.message !== "load") fail(String(error.stack ?? error));
} finally {
  await Promise.all([torchServer.close(), referenceServer.close()]);
  for (const copy of copies) rmSync(copy, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
process.exitCode = summary.ok ? 0 : 1;
