// The videos API (issue 53, item 8): N jobs (default 200) submitted at once to `/v1/videos` against
// the CPU text-to-video example at a tiny size, against the same N videos over the gRPC stream
// (`generateVideo`, the way galley-video streams them) with the same concurrency limit (the
// API's --videos-concurrency; a pool of that many streams). Per store (SQLite, then PostgreSQL
// when Debian's server binaries are there): all N complete; videos per second each way and their
// ratio, measured in the same run with the modes alternating; the create answers' latency; the
// process's RSS after the warm-up, after each batch and after a second API batch (memory flat).
// The server runs in this process (so RSS is the server's and the bench's together); the API's
// jobs are also GIF-encoded (a worker thread) and stored, which the gRPC path's client does not
// ask for: that is the API's cost, measured.
// Run: node --expose-gc --import tsx bench/videos-api.ts [--jobs=200] [--steps=4] [--frames=3]
//   [--size=64x64] [--concurrency=2] [--reps=1] [--stores=sqlite,postgres]
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient, createVideosClient, type Video } from "@galley/client";
import { generateVideo } from "@galley/example-text-to-video";
import { createLogger, createServer } from "@galley/server";
import { startPostgres } from "../packages/server/test/postgres-cluster.js";

const option = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const JOBS = Number(option("jobs", "200"));
const STEPS = Number(option("steps", "4"));
const FRAMES = Number(option("frames", "3"));
const SIZE = option("size", "64x64");
const CONCURRENCY = Number(option("concurrency", "2"));
const REPS = Number(option("reps", "1"));
const STORES = option("stores", "sqlite,postgres").split(",");
const MODELS = fileURLToPath(new URL("../examples/text-to-video/models", import.meta.url));

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

/** N videos over the gRPC stream, CONCURRENCY at a time; seconds. */
async function overGrpc(url: string): Promise<number> {
  const client = createGrpcClient({ baseUrl: url });
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < JOBS; i = next++) {
        await generateVideo(client, {
          prompt: prompt(i),
          frames: FRAMES,
          steps: STEPS,
          resolution: RESOLUTION,
          // As the API's jobs ask (text_to_video's videos_api.fixed_inputs).
          previewEvery: 5,
          progressIntervalMs: 100,
        });
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
  try {
    const { http, grpc, failedModels } = await server.listen();
    if (failedModels.length > 0) throw new Error(`models that did not load: ${failedModels.join(", ")}`);
    const base = `http://127.0.0.1:${http?.port}`;
    const grpcUrl = `http://127.0.0.1:${grpc?.port}`;
    // Warm-up: sessions, workers and code paths of both ways.
    await Promise.all([overGrpcN(grpcUrl, 4), overApiN(base, 4)]);
    const load = loadavg()[0]?.toFixed(1);
    const rss = [memory()];
    const rows: string[] = [];
    const ratios: number[] = [];
    for (let rep = 0; rep < REPS; rep++) {
      // Alternate which goes first.
      const order = rep % 2 === 0 ? ["grpc", "api"] : ["api", "grpc"];
      const result: Record<string, number> = {};
      let create = { createP50: 0, createMax: 0 };
      for (const mode of order) {
        if (mode === "grpc") result.grpc = await overGrpc(grpcUrl);
        else {
          const api = await overApi(base);
          result.api = api.seconds;
          create = api;
        }
        rss.push(memory());
      }
      const grpcRate = JOBS / (result.grpc ?? 1);
      const apiRate = JOBS / (result.api ?? 1);
      ratios.push(apiRate / grpcRate);
      rows.push(
        `| ${store} | ${rep + 1} | ${grpcRate.toFixed(2)} | ${apiRate.toFixed(2)} | ${(apiRate / grpcRate).toFixed(3)} | ${create.createP50.toFixed(0)} / ${create.createMax.toFixed(0)} |`,
      );
    }
    // A second API batch: memory flat?
    await overApi(base);
    rss.push(memory());
    console.log(
      `\n${store}: ${JOBS} jobs of ${SIZE}, ${FRAMES} frames, ${STEPS} steps; concurrency ${CONCURRENCY}; load average ${load} before, ${loadavg()[0]?.toFixed(1)} after`,
    );
    console.log("| store | rep | gRPC videos/s | API videos/s | API / gRPC | create answered p50 / max ms |");
    console.log("| --- | --- | --- | --- | --- | --- |");
    for (const row of rows) console.log(row);
    const sorted = [...ratios].sort((a, b) => a - b);
    const median =
      sorted.length % 2
        ? sorted[(sorted.length - 1) / 2]
        : ((sorted[sorted.length / 2 - 1] ?? 0) + (sorted[sorted.length / 2] ?? 0)) / 2;
    console.log(
      `API / gRPC: median ${median?.toFixed(3)} (${sorted[0]?.toFixed(3)}-${sorted.at(-1)?.toFixed(3)}) over ${REPS} reps`,
    );
    console.log(`RSS/heap MB: after warm-up ${rss.join(" -> ")} (after each batch, the last a second API batch)`);
  } finally {
    await server.close();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
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
for (const store of STORES) await runStore(store);
