// The text-to-video example (examples/text-to-video) under 1, 4 and 8 concurrent users on the CPU:
// - pipeline: each user streams text_to_video (the denoising loop runs inside the server, BLS);
// - step by step: each user drives the same models itself over gRPC, as a team without a pipeline
//   server would: encode_prompt, then one denoiser call per step with the DDIM update in the
//   client, then vae_decoder and upscale_video.
// Per mode and user count: videos per minute, p50/p95 latency per video, and the average batch
// size text_encoder and denoiser executed (inference_count / execution_count from the statistics
// API), and the CPU time per video of the server's process and the clients' (a child process;
// --clients=inline runs them in the server's), the whole cost of a video in each mode: when the
// cores are the limit, the ratio of the two modes' CPU per video bounds their throughput ratio.
// "Main thread busy": the server's event loop's share of the wall time (near 1: it is the limit);
// "main ms/video": that thread's CPU per video, and "main GC ms/video" the garbage collector's
// pauses on it (Node's `gc` performance entries): what every message through that thread queues behind.
// "First step": from a video's request to its first denoising step's result, the first progress a
// client can show (the pipeline's first STEP response; step by step, the first denoiser reply).
// Modes alternate within each repetition; medians and min-max spreads over the repetitions; the
// load average before and after.
// Run: npx tsx bench/text-to-video.ts [--reps=3] [--videos=3] [--steps=20] [--frames=8] [--progress-ms=100] [--clients=inline]
//   [--users=1,4,8] [--warmups=0]
// --warmups=<n>: besides the warm-up at the most users, n untimed runs of each mode at every user
// count first. TorchScript's profiling executor specializes a model on the first runs at each new
// shape (batch size), the second of them compiling its fusions (a second at a real-size text
// encoder): real-size runs on a GPU need 2 or more, or a run's first videos pay it.
// --trace=<file>: after the measured runs, one more pipeline run at the most users (or
// --trace-users=<n>) with every
// text_to_video request traced (Triton's trace extension, children included), then where a video's
// time went from that trace (galley trace-summary's report), the file kept.
// --main-profile=<file>: after the measured runs, one more pipeline run at the most users with the
// server's main thread under V8's CPU profiler (100 µs samples); the .cpuprofile is written to
// <file> (Chrome DevTools opens it) and the functions with the most self time are listed.
// --batch-reasons: why the denoiser's dynamic batcher sent each batch (its verbose log: filled, delay
// expired, waiting has not paid off, ...), counted per mode at the most users: a batcher that waits
// stalls every loop of the pipeline's lockstep call.
// --server-log: the server's own log (info level) on stderr.
// --modes=pipeline: the pipeline alone (no step-by-step client, no ratios); default both.
// On a GPU: --config=gpu serves the GPU variant (Triton's --model-config-name; the heavy models on
// the PyTorch backend, KIND_GPU); --models=<dir> where examples/text-to-video/models is (a bundle),
// or a generated models-real repository (with --resolution=256x256|512x512|1024x1024 --frames=32).
import { type ChildProcess, fork } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { type Profiler, Session } from "node:inspector/promises";
import { createServer as createNetServer } from "node:net";
import { loadavg } from "node:os";
import { PerformanceObserver } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { createGrpcClient, type GrpcClient, tensor } from "@galley/client";
import { generateVideo } from "@galley/example-text-to-video";
import { createLogger, createServer } from "@galley/server";
// The schedule and DDIM update as the pipeline's own model uses them: a client has to do the same.
import { ddimStep, timesteps } from "../examples/text-to-video/models/text_to_video/1/ddim.js";
import { parseTraceFile, summarizeTraces } from "../packages/server/src/cli/trace-summary.js";

const option = (name: string, fallback: number) => {
  const found = process.argv.find((a) => a.startsWith(`--${name}=`));
  return found ? Number(found.split("=")[1]) : fallback;
};
const REPS = option("reps", 3);
const VIDEOS = option("videos", 3);
const STEPS = option("steps", 20);
const FRAMES = option("frames", 8);
/** The pipeline's PROGRESS_INTERVAL_MS: galley-video's 100 ms; 0 streams a response every step. */
const PROGRESS_MS = option("progress-ms", 100);
/** `--resolution=HxW`, one of the served preflight's (models-real: 256x256, 512x512, 1024x1024). */
const RESOLUTION = process.argv.find((a) => a.startsWith("--resolution="))?.split("=")[1] ?? "64x64";
/** `--users=8` (or `--users=1,8`): the user counts to run; the ratios need 8. */
const USERS = (process.argv.find((a) => a.startsWith("--users="))?.split("=")[1] ?? "1,4,8").split(",").map(Number);
const WARMUPS = option("warmups", 0);
/** `--trace-users=1`: how many users the traced run has (default the most of `--users`). */
const TRACE_USERS = option("trace-users", Math.max(...USERS));

async function stepByStep(client: GrpcClient, prompt: string, onFirstStep: () => void): Promise<void> {
  const keyframes = Math.max(2, Math.ceil(FRAMES / 2));
  const [height = 64, width = 64] = RESOLUTION.split("x").map(Number);
  const encoded = await client.infer("encode_prompt", { inputs: { PROMPT: tensor.bytes([1, 1], [prompt]) } });
  const embeddingShape = encoded.output("EMBEDDING").shape;
  const embedding = encoded.output("EMBEDDING").fp32();
  const shape = [keyframes, 4, height / 32, width / 32];
  let latent = Float32Array.from(
    { length: keyframes * 4 * (height / 32) * (width / 32) },
    (_, i) => Math.sin(i * 12.9898) % 1,
  );
  let x0 = new Float32Array(latent.length);
  for (let step = 0; step < STEPS; step++) {
    const { t, prev } = timesteps(step, STEPS);
    const reply = await client.infer("denoiser", {
      inputs: {
        LATENT: tensor.fp32([1, ...shape], latent),
        TIMESTEP: tensor.fp32([1, 1], [t]),
        TEXT_EMBEDDING: tensor.fp32(embeddingShape, embedding),
      },
    });
    const eps = reply.output("NOISE_PRED").fp32();
    ({ next: latent, x0 } = ddimStep(latent, eps, t, prev));
    if (step === 0) onFirstStep();
  }
  const decoded = await client.infer("vae_decoder", { inputs: { LATENT: tensor.fp32(shape, x0) } });
  const image = decoded.output("IMAGE");
  await client.infer("upscale_video", {
    inputs: { FRAMES: tensor.fp32(image.shape, image.fp32()), FRAME_COUNT: tensor.int32([1], [FRAMES]) },
  });
}

async function counts(client: GrpcClient, model: string): Promise<[number, number]> {
  const s = (await client.statistics(model)).modelStats[0];
  return [Number(s?.inferenceCount ?? 0n), Number(s?.executionCount ?? 0n)];
}

/** A model's time per video (statistics API: queue, and compute input + infer + output) and requests per video. */
interface Stage {
  queueMs: number;
  computeMs: number;
  requests: number;
}

type Totals = Map<string, { queue: number; compute: number; requests: number }>;

/** Every model's cumulative queue and compute time (ns) and successful requests. */
async function totals(client: GrpcClient): Promise<Totals> {
  const out: Totals = new Map();
  for (const m of (await client.statistics("")).modelStats) {
    const i = m.inferenceStats;
    out.set(m.name, {
      queue: Number(i?.queue?.ns ?? 0n),
      compute: Number((i?.computeInput?.ns ?? 0n) + (i?.computeInfer?.ns ?? 0n) + (i?.computeOutput?.ns ?? 0n)),
      requests: Number(i?.success?.count ?? 0n),
    });
  }
  return out;
}

interface Run {
  /** Per model, what one video cost it (ensembles and text_to_video left out: they contain the rest). */
  stages: Map<string, Stage>;
  videosPerMinute: number;
  p50: number;
  p95: number;
  /** Median ms from a video's request to its first denoising step's result. */
  firstStep: number;
  textBatch: number;
  denoiserBatch: number;
  cpuPerVideo: number;
  /** The server's main thread: the share of the run's wall time it was busy (Linux; NaN elsewhere). */
  mainBusy: number;
  /** The server's main thread: its CPU ms per video (Linux; NaN elsewhere). */
  mainPerVideo: number;
  /** The garbage collector's pauses on the server's main thread, ms per video. */
  gcPerVideo: number;
}

/** The garbage collector's pauses on the server's main thread so far, in ms (counted from `main`). */
let gcPauseMs = 0;

/** CPU time of this process's main thread so far, in ms (utime + stime from /proc, in clock ticks of 10 ms). */
function mainThreadCpuMs(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return Number.NaN;
  }
}

type Mode = "pipeline" | "step by step";
/** `--modes=pipeline`: only the pipeline (the step-by-step client, and the ratios, left out). */
const MODES: readonly Mode[] = (process.argv.find((a) => a.startsWith("--modes="))?.slice(8) ?? "pipeline,step by step")
  .split(",")
  .filter((m): m is Mode => m === "pipeline" || m === "step by step");

const BATCH_REASONS = process.argv.includes("--batch-reasons");
/** --server-log: the server's log (info) on stderr, e.g. to see where a run ends. */
const SERVER_LOG = process.argv.includes("--server-log");
/** `mode|users` -> the denoiser batcher's reason for each batch it sent -> batches (--batch-reasons). */
const batchReasons = new Map<string, Map<string, number>>();
/** The measured run the server's log lines belong to (runs are one at a time). */
let reasonsKey: string | undefined;
const DENOISER_BATCH = /model 'denoiser': batch of size \d+ \(\d+ request\(s\)\) sent: (.*)$/;

/** The server's log: only the denoiser's batch lines are kept, counted under the current run. */
function countBatchReason(line: string): void {
  const reason = DENOISER_BATCH.exec(line.trimEnd())?.[1];
  if (reason === undefined || reasonsKey === undefined) return;
  const counts = batchReasons.get(reasonsKey) ?? new Map<string, number>();
  counts.set(reason, (counts.get(reason) ?? 0) + 1);
  batchReasons.set(reasonsKey, counts);
}

interface Driven {
  latencies: number[];
  /** Per video, ms from its request to its first denoising step's result (the first progress a client can show). */
  firstSteps: number[];
  wall: number;
  /** CPU µs the clients' process used meanwhile (the child's own, or 0 where clients share the server's process). */
  clientCpu: number;
}

/** `users` clients making VIDEOS videos each, one after another. */
async function drive(url: string, mode: Mode, users: number): Promise<Driven> {
  const clients = Array.from({ length: users }, () => createGrpcClient({ baseUrl: url }));
  const latencies: number[] = [];
  const firstSteps: number[] = [];
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    clients.map(async (client, u) => {
      for (let v = 0; v < VIDEOS; v++) {
        const t0 = performance.now();
        const prompt = `user ${u} video ${v}: a red fox running in snow`;
        let first = false;
        const firstStep = () => {
          if (!first) firstSteps.push(performance.now() - t0);
          first = true;
        };
        if (mode === "pipeline")
          await generateVideo(
            client,
            { prompt, frames: FRAMES, steps: STEPS, resolution: RESOLUTION, progressIntervalMs: PROGRESS_MS },
            (progress) => {
              if (progress.stage === "denoise" && progress.step >= 1) firstStep();
            },
          );
        else await stepByStep(client, prompt, firstStep);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const wall = performance.now() - started;
  const used = process.cpuUsage(cpu);
  for (const client of clients) client.close();
  return { latencies, firstSteps, wall, clientCpu: used.user + used.system };
}

// --clients=process (default): the clients run in a child process of their own, as real ones do
// (a step-by-step client's round trip then crosses processes); --clients=inline: in the server's.
const CLIENTS = process.argv.includes("--clients=inline") ? "inline" : "process";
let child: ChildProcess | undefined;
function driveIn(url: string, mode: Mode, users: number): Promise<Driven> {
  if (CLIENTS === "inline") return drive(url, mode, users).then((d) => ({ ...d, clientCpu: 0 }));
  child ??= fork(fileURLToPath(import.meta.url), ["--child", ...process.argv.slice(2)], {
    execArgv: process.execArgv,
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const worker = child;
  return new Promise((resolve, reject) => {
    const exited = (code: number | null) => reject(new Error(`the clients' process exited (${code})`));
    worker.once("message", (message) => {
      worker.off("exit", exited);
      resolve(message as Driven);
    });
    worker.once("exit", exited);
    worker.send({ url, mode, users });
  });
}

/** A CPU profile's functions by self time, µs per video, as a table (idle time left out). */
function topSelfTime(profile: Profiler.Profile, videos: number, rows = 25): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  const deltas = profile.timeDeltas ?? [];
  (profile.samples ?? []).forEach((id, i) => {
    const frame = byId.get(id)?.callFrame;
    if (!frame || frame.functionName === "(idle)") return;
    const file = frame.url.replace(/^.*\/(packages|node_modules|examples)\//, "$1/");
    const key = `${frame.functionName || "(anonymous)"} ${file}${file ? `:${frame.lineNumber + 1}` : ""}`;
    self.set(key, (self.get(key) ?? 0) + (deltas[i] ?? 0));
  });
  const busy = [...self.values()].reduce((a, b) => a + b, 0);
  const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, rows);
  return [
    `busy ${(busy / videos).toFixed(0)} µs a video; the ${rows} functions with the most self time:`,
    "",
    "| µs a video | function |",
    "| --- | --- |",
    ...top.map(([key, us]) => `| ${(us / videos).toFixed(0)} | ${key} |`),
  ].join("\n");
}

async function run(url: string, mode: Mode, users: number): Promise<Run> {
  const probe = createGrpcClient({ baseUrl: url });
  const before = await Promise.all([counts(probe, "text_encoder"), counts(probe, "denoiser")]);
  const stagesBefore = await totals(probe);
  const cpu = process.cpuUsage();
  const main = mainThreadCpuMs();
  const gcBefore = gcPauseMs;
  reasonsKey = `${mode}|${users}`;
  const { latencies, firstSteps, wall, clientCpu } = await driveIn(url, mode, users);
  reasonsKey = undefined;
  const used = process.cpuUsage(cpu);
  const mainUsed = mainThreadCpuMs() - main;
  // The observer hears of a pause a turn later: the counts below come after the statistics calls.
  const after = await Promise.all([counts(probe, "text_encoder"), counts(probe, "denoiser")]);
  const stagesAfter = await totals(probe);
  probe.close();
  const videos = users * VIDEOS;
  const stages = new Map<string, Stage>();
  for (const [name, a] of stagesAfter) {
    if (["text_to_video", "encode_prompt", "upscale_video"].includes(name)) continue;
    const b = stagesBefore.get(name) ?? { queue: 0, compute: 0, requests: 0 };
    stages.set(name, {
      queueMs: (a.queue - b.queue) / 1e6 / videos,
      computeMs: (a.compute - b.compute) / 1e6 / videos,
      requests: (a.requests - b.requests) / videos,
    });
  }
  const batch = (i: number) =>
    ((after[i]?.[0] ?? 0) - (before[i]?.[0] ?? 0)) / ((after[i]?.[1] ?? 0) - (before[i]?.[1] ?? 0) || 1);
  latencies.sort((a, b) => a - b);
  firstSteps.sort((a, b) => a - b);
  const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
  return {
    stages,
    videosPerMinute: (users * VIDEOS * 60_000) / wall,
    p50: pick(0.5),
    p95: pick(0.95),
    firstStep: firstSteps[firstSteps.length >> 1] ?? Number.NaN,
    textBatch: batch(0),
    denoiserBatch: batch(1),
    cpuPerVideo: (used.user + used.system + clientCpu) / 1000 / (users * VIDEOS),
    mainBusy: mainUsed / wall,
    mainPerVideo: mainUsed / videos,
    gcPerVideo: (gcPauseMs - gcBefore) / videos,
  };
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createNetServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  return s.length % 2 ? (s[s.length >> 1] ?? 0) : ((s[s.length / 2 - 1] ?? 0) + (s[s.length / 2] ?? 0)) / 2;
};
const spread = (values: number[], digits: number) =>
  `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`;

async function main(): Promise<void> {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcPauseMs += entry.duration;
  }).observe({ entryTypes: ["gc"] });
  const models =
    process.argv.find((a) => a.startsWith("--models="))?.slice(9) ??
    fileURLToPath(new URL("../examples/text-to-video/models", import.meta.url));
  const config = process.argv.find((a) => a.startsWith("--config="))?.slice(9);
  const traceFile = process.argv.find((a) => a.startsWith("--trace="))?.slice(8);
  const profileFile = process.argv.find((a) => a.startsWith("--main-profile="))?.slice(15);
  const server = createServer({
    ...(traceFile ? { trace: { file: traceFile } } : {}),
    modelRepositories: [models],
    ...(config ? { modelConfigName: config } : {}),
    http: false,
    grpc: { host: "127.0.0.1", port: await freePort() },
    metrics: false,
    log: BATCH_REASONS
      ? createLogger({ verboseLevel: 1, write: countBatchReason })
      : createLogger({ write: SERVER_LOG ? (line) => process.stderr.write(`${line}\n`) : () => {} }),
  });
  const { grpc, failedModels } = await server.listen();
  if (failedModels.length > 0) throw new Error(`models that did not load: ${failedModels.join(", ")}`);
  const url = `http://127.0.0.1:${grpc?.port}`;
  const loadBefore = loadavg()[0] ?? 0;
  // Warm-up at the most users: sessions, workers, code paths, and every batch size the runs will see
  // (a model's first batch of a new size can cost tens of ms).
  for (const mode of MODES) await run(url, mode, Math.max(...USERS));
  for (let i = 0; i < WARMUPS; i++) for (const users of USERS) for (const mode of MODES) await run(url, mode, users);
  const results = new Map<string, Run[]>();
  // Each measured run's wall-clock window (epoch s), printed as JSON lines after the tables: a
  // GPU sampler running beside the bench (real-benchmark.py's) attributes its samples by them.
  const windows = new Map<string, [number, number][]>();
  for (let rep = 0; rep < REPS; rep++)
    for (const users of USERS)
      for (const mode of MODES) {
        const key = `${mode}|${users}`;
        const start = Date.now() / 1000;
        results.set(key, [...(results.get(key) ?? []), await run(url, mode, users)]);
        windows.set(key, [...(windows.get(key) ?? []), [start, Date.now() / 1000]]);
        process.stderr.write(".");
      }
  process.stderr.write("\n");
  const loadAfter = loadavg()[0] ?? 0;
  if (traceFile) {
    const control = createGrpcClient({ baseUrl: url });
    const model = { model: "text_to_video" };
    await control.traceSettings({ trace_level: ["TIMESTAMPS"], trace_rate: "1" }, model);
    await run(url, "pipeline", TRACE_USERS);
    await control.traceSettings({ trace_level: ["OFF"] }, model);
    control.close();
  }
  let profiled = "";
  if (profileFile) {
    const inspector = new Session();
    inspector.connect();
    await inspector.post("Profiler.enable");
    await inspector.post("Profiler.setSamplingInterval", { interval: 100 });
    await inspector.post("Profiler.start");
    await run(url, "pipeline", Math.max(...USERS));
    const { profile } = await inspector.post("Profiler.stop");
    inspector.disconnect();
    writeFileSync(profileFile, JSON.stringify(profile));
    profiled = topSelfTime(profile, Math.max(...USERS) * VIDEOS);
  }
  process.stderr.write("closing the server\n");
  await server.close();
  process.stderr.write("server closed\n");

  const lines = [
    `text-to-video at ${RESOLUTION}, clients in ${CLIENTS === "process" ? "a process of their own" : "the server's process"}, ${FRAMES} frames, ${STEPS} steps, pipeline progress every ${PROGRESS_MS} ms at most, ${VIDEOS} videos per user, ${REPS} repetitions: median (min–max); load average ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after`,
    "",
    "| users | mode | videos/min | p50 ms | p95 ms | text_encoder batch | denoiser batch | CPU ms/video | main thread busy | main ms/video | main GC ms/video | first step p50 ms |",
    `|${" --- |".repeat(12)}`,
  ];
  for (const users of USERS)
    for (const mode of MODES) {
      const runs = results.get(`${mode}|${users}`) ?? [];
      lines.push(
        `| ${users} | ${mode} | ${spread(
          runs.map((r) => r.videosPerMinute),
          0,
        )} | ${spread(
          runs.map((r) => r.p50),
          0,
        )} | ${spread(
          runs.map((r) => r.p95),
          0,
        )} | ${spread(
          runs.map((r) => r.textBatch),
          2,
        )} | ${spread(
          runs.map((r) => r.denoiserBatch),
          2,
        )} | ${spread(
          runs.map((r) => r.cpuPerVideo),
          0,
        )} | ${spread(
          runs.map((r) => r.mainBusy),
          2,
        )} | ${spread(
          runs.map((r) => r.mainPerVideo),
          1,
        )} | ${spread(
          runs.map((r) => r.gcPerVideo),
          1,
        )} | ${spread(
          runs.map((r) => r.firstStep),
          1,
        )} |`,
      );
    }
  const most = Math.max(...USERS);
  lines.push(
    "",
    `Where a video's time goes at ${most} users (statistics API, per video, median of the repetitions): queue + compute ms, requests`,
    "",
    "| model | pipeline | step by step |",
    "| --- | --- | --- |",
  );
  const stageOf = (mode: string, model: string, pick: (s: Stage) => number) =>
    median(
      (results.get(`${mode}|${most}`) ?? []).map((r) => (r.stages.get(model) ? pick(r.stages.get(model) as Stage) : 0)),
    );
  const cell = (mode: Mode, model: string) =>
    !MODES.includes(mode)
      ? "-"
      : `${stageOf(mode, model, (s) => s.queueMs).toFixed(1)} + ${stageOf(mode, model, (s) => s.computeMs).toFixed(1)} ms, ${stageOf(mode, model, (s) => s.requests).toFixed(1)}`;
  for (const model of [...(results.get(`pipeline|${most}`)?.[0]?.stages.keys() ?? [])].sort())
    lines.push(`| ${model} | ${cell("pipeline", model)} | ${cell("step by step", model)} |`);
  if (BATCH_REASONS) {
    const atMost = ["pipeline", "step by step"].map((mode) => batchReasons.get(`${mode}|${most}`) ?? new Map());
    const reasons = new Set(atMost.flatMap((m) => [...m.keys()]));
    const count = (mode: string, reason: string) => batchReasons.get(`${mode}|${most}`)?.get(reason) ?? 0;
    lines.push(
      "",
      `Why the denoiser's batches were sent at ${most} users (its batcher's verbose log; every run at that count: warm-up, repetitions, a traced run)`,
      "",
      "| reason | pipeline | step by step |",
      "| --- | --- | --- |",
      ...[...reasons].sort().map((r) => `| ${r} | ${count("pipeline", r)} | ${count("step by step", r)} |`),
    );
  }
  if (MODES.length === 2) {
    const ratios = Array.from({ length: REPS }, (_, i) => {
      const p = results.get("pipeline|8")?.[i]?.videosPerMinute ?? 0;
      const s = results.get("step by step|8")?.[i]?.videosPerMinute ?? 1;
      return p / s;
    });
    const cpuRatios = Array.from({ length: REPS }, (_, i) => {
      const p = results.get("pipeline|8")?.[i]?.cpuPerVideo ?? 1;
      const s = results.get("step by step|8")?.[i]?.cpuPerVideo ?? 0;
      return s / p;
    });
    const denoiser8 = median((results.get("pipeline|8") ?? []).map((r) => r.denoiserBatch));
    lines.push(
      "",
      `8 users, pipeline / step by step throughput: ${spread(ratios, 2)} (target >= 2: ${median(ratios) >= 2 ? "met" : "NOT met"})`,
      `8 users, CPU per video, step by step / pipeline: ${spread(cpuRatios, 2)} (the throughput ratio's bound where the cores are the limit)`,
      `8 users, pipeline's average denoiser batch: ${denoiser8.toFixed(2)} (target >= 3: ${denoiser8 >= 3 ? "met" : "NOT met"})`,
    );
  }
  if (traceFile)
    lines.push(
      "",
      `Traced pipeline run at ${TRACE_USERS} users (${traceFile}):`,
      summarizeTraces(parseTraceFile(readFileSync(traceFile, "utf8"))),
    );
  if (profileFile)
    lines.push(
      "",
      `The server's main thread in a pipeline run at ${Math.max(...USERS)} users (${profileFile}):`,
      profiled,
    );
  for (const [key, list] of windows) {
    const [mode, users] = key.split("|");
    lines.push(JSON.stringify({ users: Number(users), mode, windows: list }));
  }
  process.stdout.write(`${lines.join("\n")}\n`);
  child?.kill();
}

if (process.argv.includes("--child")) {
  process.on("message", (job: { url: string; mode: Mode; users: number }) => {
    void drive(job.url, job.mode, job.users).then((d) => process.send?.(d));
  });
} else {
  await main();
}
