// Low-load latency on a compute-bound model (issue 21, item 0): the FP32 MLP of batching.ts
// (1024 → 4096 → 1024, `[1,1024]` per request) at concurrency 1, KServe v2 JSON over HTTP/1.1
// keep-alive, against the hand-written server (node:http + one session.run per request with
// onnxruntime-node's default session options) measured in the same run. Galley serves
// `mlp_batched` (dynamic batching, max_queue_delay 500 µs) and `mlp_unbatched` from one process.
// Each repetition times `--samples` sequential calls per target after `--warmup` untimed ones,
// targets interleaved; p50 ratios are paired by repetition. Server CPU per call (from each
// process's own process.cpuUsage) is printed as well: it is steadier than wall time on a busy VM.
//
// `--hot-wait-us=N` sets `worker_hot_wait_us` in both MLP configs (the default when absent);
// `--before=<checkout>` adds Galley from that checkout's built server package (a worktree of an
// earlier commit, as for ab-server.ts) as two more targets, for a before/after in one run.
//
//   npx tsx bench/mlp-latency.ts [--reps=5] [--samples=300] [--warmup=50] [--hot-wait-us=N] [--before=<checkout>]
import { request } from "node:http";
import { keepAlive } from "./lib/binary-http.js";
import { type Child, startChild } from "./lib/ipc.js";
import { BATCHED, MLP_OUT, mlpInput, UNBATCHED, writeRepository } from "./lib/mlp.js";
import { machineLine, option, textOption } from "./lib/setup.js";
import { formatSpread, median, pairedRatios, percentile, spread, table } from "./lib/stats.js";

const reps = option("reps", 5);
const samples = option("samples", 300);
const warmup = option("warmup", 50);

const hotWait = option("hot-wait-us", -1);
const repository = await writeRepository(undefined, hotWait < 0 ? {} : { worker_hot_wait_us: String(hotWait) });
const galley = await startChild<{ http: number }>(new URL("./lib/galley-repo-process.ts", import.meta.url), [
  repository.dir,
  BATCHED,
  UNBATCHED,
]);
const before = textOption("before", "");
const galleyBefore = before
  ? await startChild<{ http: number }>(
      new URL("./lib/galley-repo-process.ts", import.meta.url),
      [repository.dir, BATCHED, UNBATCHED],
      { BENCH_GALLEY_BUILD: before },
    )
  : undefined;
const hand = await startChild<{ http: number }>(new URL("./lib/hand-written-mlp-process.ts", import.meta.url), [
  repository.modelFile,
]);

const input = Array.from(mlpInput(1));
const body = Buffer.from(
  JSON.stringify({ inputs: [{ name: "INPUT", shape: [1, 1024], datatype: "FP32", data: input }] }),
);
const agent = keepAlive(1);

function call(port: number, model: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path: `/v2/models/${model}/infer`,
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": body.byteLength },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode !== 200) return reject(new Error(`${model}: ${res.statusCode} ${text}`));
          const out = (JSON.parse(text) as { outputs: { data: number[] }[] }).outputs[0];
          if (out?.data.length !== MLP_OUT) return reject(new Error(`${model}: bad output`));
          resolve();
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

interface Target {
  key: string;
  label: string;
  child: Child<{ http: number }>;
  model: string;
}
const targets: Target[] = [
  { key: "hw", label: "hand-written node:http + session.run (default options)", child: hand, model: "mlp" },
  { key: "batched", label: `Galley ${BATCHED} (dynamic batching, 500 µs)`, child: galley, model: BATCHED },
  { key: "unbatched", label: `Galley ${UNBATCHED}`, child: galley, model: UNBATCHED },
];
if (galleyBefore) {
  targets.push(
    { key: "before-batched", label: `before: Galley ${BATCHED}`, child: galleyBefore, model: BATCHED },
    { key: "before-unbatched", label: `before: Galley ${UNBATCHED}`, child: galleyBefore, model: UNBATCHED },
  );
}
const p50: Record<string, number[]> = {};
const p99: Record<string, number[]> = {};
const cpu: Record<string, number[]> = {};
try {
  for (const t of targets) {
    p50[t.key] = [];
    p99[t.key] = [];
    cpu[t.key] = [];
  }
  for (let rep = 0; rep < reps; rep++) {
    for (const t of targets) {
      const port = t.child.ready.http;
      for (let i = 0; i < warmup; i++) await call(port, t.model);
      const before = await t.child.call<number>({});
      const times: number[] = [];
      for (let i = 0; i < samples; i++) {
        const start = process.hrtime.bigint();
        await call(port, t.model);
        times.push(Number(process.hrtime.bigint() - start) / 1000);
      }
      const after = await t.child.call<number>({});
      p50[t.key]?.push(percentile(times, 50));
      p99[t.key]?.push(percentile(times, 99));
      cpu[t.key]?.push((after - before) / samples);
    }
  }
} finally {
  agent.destroy();
  await galley.stop();
  await galleyBefore?.stop();
  await hand.stop();
  await repository.remove();
}

console.log(`MLP 1024→4096→1024, [1,1024] FP32, c = 1, HTTP JSON; ${reps} reps × ${samples} calls`);
console.log(`${machineLine()}\n`);
const f = (v: number[] | undefined, d = 0) => formatSpread(spread(v ?? []), d);
console.log(
  table(
    ["target", "p50 µs", "p99 µs", "server CPU µs/call", "p50 / hand-written"],
    targets.map((t) => [
      t.label,
      f(p50[t.key]),
      f(p99[t.key]),
      f(cpu[t.key]),
      t.key === "hw" ? "1.00" : f(pairedRatios(p50[t.key] ?? [], p50.hw ?? []), 2),
    ]),
  ),
);
const worst = Math.max(
  median(pairedRatios(p50.batched ?? [], p50.hw ?? [])),
  median(pairedRatios(p50.unbatched ?? [], p50.hw ?? [])),
);
console.log(
  `\ntarget: Galley p50 ≤ 1.3 × hand-written: worst median ratio ${worst.toFixed(2)} ${worst <= 1.3 ? "PASS" : "MISS"}`,
);
