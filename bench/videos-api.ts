// The videos API (issue 53, item 8): N jobs (default 200) submitted at once to `/v1/videos` against
// the CPU text-to-video example at a tiny size, against the same N videos over the gRPC stream
// (`generateVideo`, the way galley-video streams them) with the same concurrency limit (the
// API's --videos-concurrency; a pool of that many streams). Per store (SQLite, then PostgreSQL
// when Debian's server binaries are there): all N complete; `--rounds` rounds, each one batch
// each way back to back (interleaved: gRPC then API, then API then gRPC, ...), so that the two
// halves of a round see the same machine; the API / gRPC ratio of each round, their median, its
// spread and a confidence interval for it, what other processes used of the CPUs during each
// round, and the 5 % target judged on that interval; the create answers' latency; the process's
// RSS after the warm-up, after each batch and after a last API batch (memory flat).
// The server runs in this process (so RSS is the server's and the bench's together). Both ways end
// with the same GIF file (the server's encoder, each in a worker thread: the API's jobs, and the
// gRPC path as galley-video writes its video); the API also writes its rows, a thumbnail and the
// previews: that is the API's cost, measured.
// Run: npm run bench:videos-api -- [--jobs=200] [--steps=4] [--frames=3] [--size=64x64]
//   [--concurrency=2] [--rounds=9] [--stores=sqlite,postgres] [--models=examples/text-to-video/models]
//   (or node --expose-gc --import tsx bench/videos-api.ts ..., with the server built)
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient, createVideosClient, type Video } from "@galley/client";
import { generateVideo } from "@galley/example-text-to-video";
import { createLogger, createServer } from "@galley/server";
import { createVideoEncoder, type VideoEncoder } from "@galley/server/internal";
import { findPostgresBin, startPostgres } from "../packages/server/test/postgres-cluster.js";
import { type MachineLoad, watchMachineLoad } from "./lib/machine-load.js";
import { median, medianInterval, percentile } from "./lib/stats.js";

const option = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const JOBS = Number(option("jobs", "200"));
const STEPS = Number(option("steps", "4"));
const FRAMES = Number(option("frames", "3"));
const SIZE = option("size", "64x64");
const CONCURRENCY = Number(option("concurrency", "2"));
// `--reps` was this option's name before rounds were interleaved.
const ROUNDS = Number(option("rounds", option("reps", "9")));
const STORES = option("stores", "sqlite,postgres").split(",");
/** The target: the API's throughput at least this share of the gRPC stream's. */
const TARGET = 0.95;
/** The share of the CPUs other processes may use, at the median round, for the target to be judged. */
const QUIET_SHARE = 0.1;
// `--models`: for a bundled copy of this script, which lies elsewhere (device-run.sh's videosapi step).
const MODELS = option("models", fileURLToPath(new URL("../examples/text-to-video/models", import.meta.url)));

const gc = (globalThis as { gc?: () => void }).gc;
/** RSS and JS heap in use, in MB, after a collection when gc is exposed. */
const memory = () => {
  gc?.();
  const { rss, heapUsed } = process.memoryUsage();
  return `${(rss / 2 ** 20).toFixed(0)}/${(heapUsed / 2 ** 20).toFixed(0)}`;
};
const prompt = (i: number) => `a red fox running in snow, take ${i}`;
/** The gRPC stream's RESOLUTION is HxW; the API's size WxH. */
const RESOLUTION = SIZE.split("x").reverse().join("x");

/** The API's frame rate for the example (text_to_video's `videos_api.fps`). */
const FPS = 8;

/**
 * N videos over the gRPC stream, CONCURRENCY at a time, each written as the same GIF file the API
 * writes (the server's encoder, in a worker thread of its own), as galley-video writes one; seconds.
 */
async function overGrpc(url: string, encoder: VideoEncoder, dir: string): Promise<number> {
  const client = createGrpcClient({ baseUrl: url });
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < JOBS; i = next++) {
        const video = await generateVideo(client, {
          prompt: prompt(i),
          frames: FRAMES,
          steps: STEPS,
          resolution: RESOLUTION,
          // As the API's jobs ask (text_to_video's videos_api.fixed_inputs).
          previewEvery: 5,
          progressIntervalMs: 100,
        });
        await encoder.video(video, FPS, join(dir, `grpc-${i}.gif`));
      }
    }),
  );
  return (performance.now() - start) / 1000;
}

/** N videos created at once through the API, then polled (one list call each 100 ms) until all end. */
async function overApi(base: string): Promise<{ seconds: number; createP50: number; createMax: number }> {
  const videos = createVideosClient({ baseUrl: base });
  const start = performance.now();
  const answers: number[] = [];
  const created = await Promise.all(
    Array.from({ length: JOBS }, async (_, i) => {
      const video = await videos.create({
        model: "text_to_video",
        prompt: prompt(i),
        size: SIZE,
        frames: FRAMES,
        steps: STEPS,
      });
      answers.push(performance.now() - start);
      return video.id;
    }),
  );
  const pending = new Set(created);
  while (pending.size > 0) {
    let after: string | undefined;
    for (;;) {
      const page = await videos.list({ limit: 100, order: "asc", ...(after ? { after } : {}) });
      for (const video of page.data as Video[]) {
        if (video.status === "completed") pending.delete(video.id);
        else if (video.status === "failed" || video.status === "cancelled") {
          throw new Error(`${video.id} ended ${video.status}: ${JSON.stringify(video.error)}`);
        }
      }
      if (!page.has_more || !page.last_id) break;
      after = page.last_id;
    }
    if (pending.size > 0) await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const seconds = (performance.now() - start) / 1000;
  // The next batch starts from an empty list.
  for (const id of created) await videos.cancel(id);
  answers.sort((a, b) => a - b);
  return { seconds, createP50: answers[Math.floor(answers.length / 2)] ?? 0, createMax: answers.at(-1) ?? 0 };
}

/** One round: a batch each way, back to back. */
interface Round {
  first: "grpc" | "api";
  grpcRate: number;
  apiRate: number;
  /** The denoiser's average batch during each mode's batch (its users' steps batched together). */
  grpcBatch: number;
  apiBatch: number;
  createP50: number;
  createMax: number;
  load: MachineLoad;
}

const fixed = (value: number, digits: number) => (Number.isNaN(value) ? "n/a" : value.toFixed(digits));

function row(r: Round): string[] {
  return [
    r.first === "grpc" ? "gRPC, API" : "API, gRPC",
    fixed(r.grpcRate, 2),
    fixed(r.apiRate, 2),
    fixed(r.apiRate / r.grpcRate, 3),
    `${fixed(r.grpcBatch, 2)} / ${fixed(r.apiBatch, 2)}`,
    `${fixed(r.createP50, 0)} / ${fixed(r.createMax, 0)}`,
    fixed(r.load.otherCores, 2),
    r.load.helperCores > 0 ? fixed(r.load.helperCores, 2) : "-",
    fixed(r.load.steal * 100, 1),
    fixed(r.load.loadAverage, 1),
  ];
}

/**
 * The rounds as a table, then the target judged on the median of the rounds' ratios: met when
 * its confidence interval lies at or above TARGET, missed when it lies below, and not judged when
 * it straddles TARGET (the rounds' spread is wider than what is to be told apart).
 */
function report(store: string, rounds: Round[], rss: string[]): void {
  console.log(
    `\n${store}: ${JOBS} jobs of ${SIZE}, ${FRAMES} frames, ${STEPS} steps; concurrency ${CONCURRENCY}; ${ROUNDS} rounds`,
  );
  console.log(
    "| round | order | gRPC videos/s | API videos/s | API / gRPC | denoiser batch gRPC / API | create answered p50 / max ms | other processes' CPU (cores) | PostgreSQL's CPU (cores) | steal % | load average |",
  );
  console.log(`|${" --- |".repeat(11)}`);
  for (const [i, r] of rounds.entries()) console.log(`| ${i + 1} | ${row(r).join(" | ")} |`);
  const ratios = rounds.map((r) => r.apiRate / r.grpcRate);
  const middle = median(ratios);
  const interval = medianInterval(ratios);
  const others = rounds.map((r) => r.load.otherCores);
  console.log(
    `API / gRPC: median ${fixed(middle, 3)} over ${rounds.length} rounds; quartiles ${fixed(percentile(ratios, 25), 3)}–${fixed(percentile(ratios, 75), 3)}; range ${fixed(Math.min(...ratios), 3)}–${fixed(Math.max(...ratios), 3)}; median's interval ${fixed(interval.low, 3)}–${fixed(interval.high, 3)} (${(interval.coverage * 100).toFixed(1)} % confidence)`,
  );
  console.log(
    `machine: ${availableParallelism()} CPUs (${cpus()[0]?.model ?? "unknown"}), node ${process.version}; other processes used ${fixed(median(others), 2)} cores (median; ${fixed(Math.min(...others), 2)}–${fixed(Math.max(...others), 2)}) during the rounds (this process${store === "postgres" ? " and PostgreSQL" : ""} not counted); load average ${fixed(loadavg()[0] ?? Number.NaN, 1)} at the end`,
  );
  // On a busy machine both modes run on what is left, but not alike (the API has more threads
  // and a database to share it with): a verdict there says little of a quiet machine.
  const busy = median(others) > QUIET_SHARE * availableParallelism();
  let verdict: string;
  if (interval.coverage < 0.95)
    verdict = `not judged: ${rounds.length} rounds are too few for a 95 % interval (6 at least)`;
  else if (interval.low >= TARGET) verdict = `MET: the API's throughput is at least ${TARGET} of the gRPC stream's`;
  else if (interval.high < TARGET) verdict = `MISSED: the API's throughput is below ${TARGET} of the gRPC stream's`;
  else
    verdict = `not judged: the interval straddles ${TARGET}: the rounds vary more than the 5 % to be told apart (a quieter machine, or more rounds)`;
  if (busy && !verdict.startsWith("not judged"))
    verdict = `not judged: the machine was busy (other processes used more than ${QUIET_SHARE * 100} % of its CPUs); on it, ${verdict}`;
  console.log(`target (API within 5 % of gRPC, judged on the median's interval): ${verdict}`);
  console.log(`RSS/heap MB: after warm-up ${rss.join(" -> ")} (after each batch, the last a further API batch)`);
}

async function runStore(store: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "galley-bench-videos-"));
  const cluster = store === "postgres" ? await startPostgres() : undefined;
  const server = createServer({
    modelRepositories: [MODELS],
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    jobs: {
      jobsDir: dir,
      ffmpeg: false,
      concurrency: CONCURRENCY,
      maxQueued: JOBS + 10,
      ...(cluster ? { store: cluster.url } : {}),
    },
    log: createLogger({ write: () => {} }),
  });
  const grpcDir = mkdtempSync(join(tmpdir(), "galley-bench-grpc-videos-"));
  const encoder = createVideoEncoder(undefined);
  try {
    const { http, grpc, failedModels } = await server.listen();
    if (failedModels.length > 0) throw new Error(`models that did not load: ${failedModels.join(", ")}`);
    const base = `http://127.0.0.1:${http?.port}`;
    const grpcUrl = `http://127.0.0.1:${grpc?.port}`;
    // Warm-up: sessions, workers and code paths of both ways.
    await Promise.all([overGrpcN(grpcUrl, 4), overApiN(base, 4)]);
    const rss = [memory()];
    const rounds: Round[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Interleaved, the first mode alternating, so that drift over the run falls on both.
      const order = round % 2 === 0 ? (["grpc", "api"] as const) : (["api", "grpc"] as const);
      const load = watchMachineLoad(cluster ? [cluster.pid] : []);
      let grpcSeconds = Number.NaN;
      let api = { seconds: Number.NaN, createP50: Number.NaN, createMax: Number.NaN };
      const batch = { grpc: Number.NaN, api: Number.NaN };
      for (const mode of order) {
        const before = await denoiserCounts(grpcUrl);
        if (mode === "grpc") grpcSeconds = await overGrpc(grpcUrl, encoder, grpcDir);
        else api = await overApi(base);
        const after = await denoiserCounts(grpcUrl);
        batch[mode] = (after.inferences - before.inferences) / (after.executions - before.executions);
        rss.push(memory());
      }
      const result: Round = {
        first: order[0],
        grpcRate: JOBS / grpcSeconds,
        apiRate: JOBS / api.seconds,
        grpcBatch: batch.grpc,
        apiBatch: batch.api,
        createP50: api.createP50,
        createMax: api.createMax,
        load: load(),
      };
      rounds.push(result);
      console.error(`${store} round ${round + 1}/${ROUNDS}: ${row(result).join(" | ")}`);
    }
    // A last API batch: memory flat?
    await overApi(base);
    rss.push(memory());
    report(store, rounds, rss);
  } finally {
    await server.close();
    await encoder.close();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
    rmSync(grpcDir, { recursive: true, force: true });
  }
}

/**
 * The denoiser's inference and execution counts (statistics): their ratio over a batch is its
 * average batch, how many videos' steps it ran at once. With two videos at a time they either step
 * together (batches of 2) or apart (the batcher waits up to its 6 ms for a partner that is not
 * coming): the rounds' throughput follows which.
 */
async function denoiserCounts(url: string): Promise<{ inferences: number; executions: number }> {
  const stats = (await createGrpcClient({ baseUrl: url }).statistics("denoiser")).modelStats[0];
  return { inferences: Number(stats?.inferenceCount ?? 0n), executions: Number(stats?.executionCount ?? 0n) };
}

/** A warm-up of n videos each way. */
async function overGrpcN(url: string, n: number): Promise<void> {
  const client = createGrpcClient({ baseUrl: url });
  await Promise.all(
    Array.from({ length: n }, (_, i) =>
      generateVideo(client, { prompt: prompt(i), frames: FRAMES, steps: STEPS, resolution: RESOLUTION }),
    ),
  );
}

async function overApiN(base: string, n: number): Promise<void> {
  const videos = createVideosClient({ baseUrl: base });
  const ids = await Promise.all(
    Array.from(
      { length: n },
      async (_, i) =>
        (await videos.create({ model: "text_to_video", prompt: prompt(i), size: SIZE, frames: FRAMES, steps: STEPS }))
          .id,
    ),
  );
  for (const id of ids) {
    for await (const event of videos.events(id)) {
      const status = event.type === "video" ? event.video.status : "in_progress";
      if (status === "failed" || status === "cancelled") throw new Error(`warm-up video ${id} ended ${status}`);
    }
    await videos.cancel(id);
  }
}

console.log(`gc exposed: ${gc !== undefined} (run with node --expose-gc --import tsx for RSS after a collection)`);
console.log(
  `load average before: ${loadavg()
    .map((l) => l.toFixed(1))
    .join(" ")} (1, 5, 15 min)`,
);
for (const store of STORES) {
  if (store === "postgres" && findPostgresBin() === undefined) {
    console.log("\npostgres: skipped: no PostgreSQL server binaries (Debian's /usr/lib/postgresql/<v>/bin, or PG_BIN)");
    continue;
  }
  await runStore(store);
}
