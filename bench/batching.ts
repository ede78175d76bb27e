// Dynamic batching on a compute-bound model, and the ensemble's own cost.
// - mlp_batched (dynamic_batching, preferred 8/16/32, 500 µs delay) vs mlp_unbatched (default scheduler):
//   requests/s of batch-1 requests at concurrency 1, 8 and 32, over binary HTTP;
// - in-process session.run (Galley's session settings) at batch 1..32: the compute alone;
// - a latency-vs-batch-size table (requests of [b,1024] sent one at a time to mlp_unbatched);
// - ensemble_add_sub vs a client making the same six `simple` calls itself, at concurrency 8.
// Run: npx tsx bench/batching.ts [--reps=N] [--duration=S] [--warmup=S] [--window=S] [--calls=N] [--intra=N]
//      [--hot-wait-us=N] (worker_hot_wait_us in both MLP configs; the default when absent)
import { pathToFileURL } from "node:url";
import type { BatchingJob, CallSpec, LoadResult } from "./lib/batching-load-process.js";
import { type Child, startChild } from "./lib/ipc.js";
import { BATCHED, INTRA_OP_THREADS, MAX_QUEUE_DELAY_US, UNBATCHED, writeRepository } from "./lib/mlp.js";
import { machineLine, option, type TargetResult, verdict } from "./lib/setup.js";
import { formatSpread, median, pairedDifferences, pairedRatios, spread, table } from "./lib/stats.js";

const CONCURRENCY = [1, 8, 32];
const BATCH_SIZES = [1, 2, 4, 8, 16, 32];
const ENSEMBLE_CONCURRENCY = 8;
/** The issue's allowance over compute + max_queue_delay for p50 at concurrency 1. */
const ALLOWANCE_US = 100;

/** Executions and compute_infer time per batch size, from the model's statistics. */
type BatchStats = Map<number, Duration>;
type Duration = { count: number; ns: number };
/** The per-request phases of `inference_stats` (queue, compute_input, compute_infer, compute_output, success). */
const PHASES = ["queue", "compute_input", "compute_infer", "compute_output", "success"] as const;
type Phases = Record<(typeof PHASES)[number], Duration>;
interface Snapshot {
  batches: BatchStats;
  phases: Phases;
}

const duration = (d?: { count?: string; ns?: string }): Duration => ({
  count: Number(d?.count ?? 0),
  ns: Number(d?.ns ?? 0),
});
const minus = (a: Duration, b: Duration): Duration => ({ count: a.count - b.count, ns: a.ns - b.ns });
/** Mean of a duration in microseconds. */
const meanUs = (d: Duration | undefined) => (d && d.count > 0 ? d.ns / d.count / 1000 : Number.NaN);

/** GET /v2/models/<model>/stats (the statistics extension), reduced to what this benchmark reads. */
async function snapshot(port: number, model: string): Promise<Snapshot> {
  const res = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`);
  const body = (await res.json()) as {
    model_stats?: {
      inference_stats?: Record<string, { count: string; ns: string }>;
      batch_stats?: { batch_size: string; compute_infer?: { count: string; ns: string } }[];
    }[];
  };
  const stats = body.model_stats?.[0];
  const batches: BatchStats = new Map();
  for (const b of stats?.batch_stats ?? []) batches.set(Number(b.batch_size), duration(b.compute_infer));
  const phases = Object.fromEntries(PHASES.map((p) => [p, duration(stats?.inference_stats?.[p])])) as Phases;
  return { batches, phases };
}

/** What happened between two snapshots. */
function since(after: Snapshot, before: Snapshot): Snapshot {
  const batches: BatchStats = new Map();
  for (const [size, a] of after.batches) {
    const d = minus(a, before.batches.get(size) ?? { count: 0, ns: 0 });
    if (d.count > 0) batches.set(size, d);
  }
  const phases = Object.fromEntries(PHASES.map((p) => [p, minus(after.phases[p], before.phases[p])])) as Phases;
  return { batches, phases };
}

/** Mean time of one in-process run at `batch` rows, interpolated linearly between the sizes measured. */
function interpolate(meanUs: ReadonlyMap<number, number>, batch: number): number {
  const sizes = [...meanUs.keys()].sort((a, b) => a - b);
  const upper = sizes.find((s) => s >= batch) ?? (sizes.at(-1) as number);
  const lower = [...sizes].reverse().find((s) => s <= batch) ?? (sizes[0] as number);
  const [lo, hi] = [meanUs.get(lower) as number, meanUs.get(upper) as number];
  return upper === lower ? lo : lo + ((hi - lo) * (batch - lower)) / (upper - lower);
}

/** Rows per second session.run would reach running exactly the batches Galley formed, back to back. */
function inProcessRowsForMix(mix: BatchStats, meanUs: ReadonlyMap<number, number>): number {
  let rows = 0;
  let us = 0;
  for (const [size, { count }] of mix) {
    rows += size * count;
    us += count * interpolate(meanUs, size);
  }
  return rows / (us / 1e6);
}

const fmt = (values: number[], digits = 0) => formatSpread(spread(values), digits);

export async function measureBatching(): Promise<TargetResult[]> {
  const reps = option("reps", 3);
  const durationMs = option("duration", 2) * 1000;
  const warmupMs = option("warmup", 0.5) * 1000;
  const windowMs = option("window", 1) * 1000;
  const minSamples = option("calls", 50);
  const intraOp = option("intra", INTRA_OP_THREADS);

  const hotWait = option("hot-wait-us", -1);
  const repository = await writeRepository(intraOp, hotWait < 0 ? {} : { worker_hot_wait_us: String(hotWait) });
  let server: Child<{ http?: number }> | undefined;
  let load: Child<null> | undefined;
  try {
    server = await startChild<{ http?: number }>(new URL("./lib/galley-repo-process.ts", import.meta.url), [
      repository.dir,
      "simple",
      "ensemble_add_sub",
      BATCHED,
      UNBATCHED,
    ]);
    load = await startChild<null>(new URL("./lib/batching-load-process.ts", import.meta.url), [
      repository.modelFile,
      String(intraOp),
    ]);
    const port = server.ready.http ?? 0;
    const run = <T>(job: BatchingJob) => (load as Child<null>).call<T>(job);
    const serverCpu = () => (server as Child<{ http?: number }>).call<number>({ type: "cpu" });

    // Correctness first: Galley's outputs against session.run's on the same rows, and the ensemble's.
    for (const model of [BATCHED, UNBATCHED]) {
      for (const batch of [1, 4]) {
        const diff = await run<number>({ type: "check-mlp", port, model, batch });
        if (!(diff < 1e-3)) throw new Error(`${model} batch ${batch}: outputs differ from session.run by ${diff}`);
      }
    }
    const ensembleOk = await run<{ ensemble: boolean; sixCalls: boolean }>({ type: "check-ensemble", port });
    if (!ensembleOk.ensemble || !ensembleOk.sixCalls)
      throw new Error(`wrong ensemble outputs ${JSON.stringify(ensembleOk)}`);

    /** A job, with what the model's statistics recorded meanwhile (warm-up included) when it is served. */
    const withStats = async <T>(model: string | undefined, job: () => Promise<T>) => {
      const before = model ? await snapshot(port, model) : undefined;
      const result = await job();
      return { ...result, stats: model && before ? since(await snapshot(port, model), before) : undefined };
    };
    /** One closed-loop point, with the cores each process kept busy over the whole job. */
    const closedLoop = (call: CallSpec, concurrency: number) =>
      withStats(call.kind === "mlp-served" ? call.model : undefined, async () => {
        const before = await serverCpu();
        const r = await run<LoadResult>({ type: "closed-loop", call, concurrency, warmupMs, durationMs });
        const serverCores = (await serverCpu()) - before;
        if (r.errors > 0) console.error(`${call.kind} at concurrency ${concurrency}: ${r.errors} errors`);
        return { ...r, serverCores: serverCores / 1000 / r.wallMs, clientCores: r.cpuUs / 1000 / r.wallMs };
      });
    type Point = Awaited<ReturnType<typeof closedLoop>>;
    const sequential = (call: CallSpec) =>
      withStats(call.kind === "mlp-served" ? call.model : undefined, () =>
        run<LoadResult>({ type: "sequential", call, warmupMs: warmupMs / 2, durationMs: windowMs, minSamples }),
      );
    type SeqPoint = Awaited<ReturnType<typeof sequential>>;

    // Every list holds one value per repetition; repetitions interleave every point.
    const served = new Map<string, Point[]>(); // `${model}/${c}`
    const ort = new Map<number, SeqPoint[]>(BATCH_SIZES.map((b) => [b, []]));
    const unbatchedSeq = new Map<number, SeqPoint[]>(BATCH_SIZES.map((b) => [b, []]));
    const ensemble: Point[] = [];
    const sixCalls: Point[] = [];
    const push = <K, T>(map: Map<K, T[]>, key: K, value: T) => {
      map.set(key, [...(map.get(key) ?? []), value]);
    };

    for (let rep = 0; rep < reps; rep++) {
      for (const concurrency of CONCURRENCY) {
        for (const model of [BATCHED, UNBATCHED]) {
          push(
            served,
            `${model}/${concurrency}`,
            await closedLoop({ kind: "mlp-served", port, model, batch: 1 }, concurrency),
          );
        }
      }
      for (const batch of BATCH_SIZES) {
        push(ort, batch, await sequential({ kind: "mlp-ort", batch }));
        push(unbatchedSeq, batch, await sequential({ kind: "mlp-served", port, model: UNBATCHED, batch }));
      }
      ensemble.push(await closedLoop({ kind: "ensemble", port }, ENSEMBLE_CONCURRENCY));
      sixCalls.push(await closedLoop({ kind: "six-calls", port }, ENSEMBLE_CONCURRENCY));
    }

    const pick = <T>(list: T[] | undefined, f: (t: T) => number) => (list ?? []).map(f);
    const rps = (model: string, c: number) => pick(served.get(`${model}/${c}`), (p) => p.perSecond);
    const results: TargetResult[] = [];
    // The batches mlp_batched formed at c=32, per repetition.
    const mixes = (served.get(`${BATCHED}/32`) ?? []).map((p) => p.stats?.batches ?? new Map<number, Duration>());
    const intro = `${reps} repetitions; every cell is median [min–max] over them`;

    // 1. Throughput with and without dynamic batching.
    console.log(
      `\nMLP 1024→4096→1024 FP32 (intra_op_thread_count ${intraOp}), batch-1 requests over HTTP binary, ` +
        `closed loop ${durationMs / 1000} s per point (${intro})\n`,
    );
    console.log(
      table(
        ["model", "c", "requests/s", "p50 µs", "p99 µs", "cores busy: server + client"],
        CONCURRENCY.flatMap((c) =>
          [BATCHED, UNBATCHED].map((model) => {
            const points = served.get(`${model}/${c}`) ?? [];
            const cores = `${median(pick(points, (p) => p.serverCores)).toFixed(2)} + ${median(pick(points, (p) => p.clientCores)).toFixed(2)}`;
            return [
              model,
              String(c),
              fmt(rps(model, c)),
              fmt(pick(points, (p) => p.p50)),
              fmt(pick(points, (p) => p.p99)),
              cores,
            ];
          }),
        ),
      ),
    );
    const speedup = CONCURRENCY.map((c) => spread(pairedRatios(rps(BATCHED, c), rps(UNBATCHED, c))));
    console.log(
      `\nmlp_batched / mlp_unbatched requests/s: ${CONCURRENCY.map((c, i) => `c=${c} ${formatSpread(speedup[i] as ReturnType<typeof spread>, 2)}`).join(", ")}`,
    );
    const speedup32 = speedup[2] as ReturnType<typeof spread>;
    results.push({
      name: "batching: batched/unbatched requests/s, c=32",
      measured: formatSpread(speedup32, 2),
      goal: "≥ 4",
      verdict: verdict(speedup32.median, 4, ">="),
    });

    // 2. Batches Galley formed at c=32, against session.run running the same batches.
    const ortMean = (rep: number) => new Map(BATCH_SIZES.map((b) => [b, ort.get(b)?.[rep]?.mean ?? Number.NaN]));
    const total: BatchStats = new Map();
    for (const mix of mixes) {
      for (const [size, s] of mix) {
        const t = total.get(size) ?? { count: 0, ns: 0 };
        total.set(size, { count: t.count + s.count, ns: t.ns + s.ns });
      }
    }
    const rowsTotal = [...total].reduce((a, [size, s]) => a + size * s.count, 0);
    const ortAll = new Map(BATCH_SIZES.map((b) => [b, median(pick(ort.get(b), (r) => r.mean))]));
    console.log(
      "\nBatches mlp_batched formed at c=32 (all repetitions; Galley's compute_infer vs session.run's mean at that size)\n",
    );
    console.log(
      table(
        ["batch size", "executions", "share of rows", "Galley compute µs", "session.run µs"],
        [...total]
          .sort(([a], [b]) => a - b)
          .map(([size, s]) => [
            String(size),
            String(s.count),
            `${((100 * size * s.count) / rowsTotal).toFixed(1)}%`,
            (s.ns / s.count / 1000).toFixed(0),
            interpolate(ortAll, size).toFixed(0),
          ]),
      ),
    );
    const servedRows = rps(BATCHED, 32);
    const ortRows = mixes.map((mix, rep) => inProcessRowsForMix(mix, ortMean(rep)));
    const galleyComputeRows = mixes.map((mix) => {
      const rows = [...mix].reduce((a, [size, s]) => a + size * s.count, 0);
      return rows / ([...mix].reduce((a, [, s]) => a + s.ns, 0) / 1e9);
    });
    const servedVsOrt = spread(pairedRatios(servedRows, ortRows));
    console.log(
      `\nrows/s at c=32: served ${fmt(servedRows)}; session.run on the same batches ${fmt(ortRows)}; ` +
        `Galley's own compute_infer alone ${fmt(galleyComputeRows)}`,
    );
    console.log(`served / session.run: ${formatSpread(servedVsOrt, 2)}`);
    results.push({
      name: "batching: served/in-process rows/s, c=32",
      measured: formatSpread(servedVsOrt, 2),
      goal: "≥ 0.9",
      verdict: verdict(servedVsOrt.median, 0.9, ">="),
    });

    // 3. Concurrency 1: a lone request waits out the queue delay, then computes.
    const c1 = pick(served.get(`${BATCHED}/1`), (p) => p.p50);
    const compute1 = pick(ort.get(1), (r) => r.p50);
    const budget = compute1.map((c) => c + MAX_QUEUE_DELAY_US + ALLOWANCE_US);
    const over = spread(pairedDifferences(c1, budget));
    console.log(
      `\nc=1 p50: mlp_batched ${fmt(c1)} µs, mlp_unbatched ${fmt(pick(served.get(`${UNBATCHED}/1`), (p) => p.p50))} µs; ` +
        `session.run batch 1 ${fmt(compute1)} µs; budget (compute + ${MAX_QUEUE_DELAY_US} + ${ALLOWANCE_US}) ${fmt(budget)} µs; ` +
        `over budget ${formatSpread(over, 0)} µs`,
    );
    results.push({
      name: "batching: p50 at c=1 − (compute + delay + 100 µs)",
      measured: `${formatSpread(over, 0)} µs`,
      goal: "≤ 0",
      verdict: verdict(over.median, 0, "<="),
    });

    console.log(
      "\nWhere the time goes at c=1 (µs per request, means; server phases from the model's inference_stats)\n",
    );
    const phase = (points: Point[], f: (p: Phases) => Duration) =>
      fmt(pick(points, (p) => meanUs(p.stats && f(p.stats.phases))));
    console.log(
      table(
        [
          "model",
          "client mean",
          "in server (success)",
          "queue",
          "compute_input",
          "compute_infer",
          "compute_output",
          "outside the core",
        ],
        [BATCHED, UNBATCHED].map((model) => {
          const points = served.get(`${model}/1`) ?? [];
          return [
            model,
            fmt(pick(points, (p) => p.mean)),
            phase(points, (x) => x.success),
            phase(points, (x) => x.queue),
            phase(points, (x) => x.compute_input),
            phase(points, (x) => x.compute_infer),
            phase(points, (x) => x.compute_output),
            fmt(pick(points, (p) => p.mean - meanUs(p.stats?.phases.success))),
          ];
        }),
      ),
    );
    console.log(`(session.run batch 1 in-process, mean: ${fmt(pick(ort.get(1), (r) => r.mean))} µs)`);

    // 4. Latency vs batch size.
    console.log(
      `\nLatency vs batch size: [b,1024] requests one at a time to mlp_unbatched (compute_infer: Galley's mean ` +
        `from batch_stats, the worker round trip), next to session.run in-process (≥ ${windowMs / 1000} s and ≥ ${minSamples} calls per point; ${intro})\n`,
    );
    const servedRowsAt = (b: number) => pick(unbatchedSeq.get(b), (r) => r.perSecond);
    const latencyRows = BATCH_SIZES.map((b, i) => {
      const s = unbatchedSeq.get(b) ?? [];
      const o = ort.get(b) ?? [];
      const prev = BATCH_SIZES[i - 1];
      const gain = prev === undefined ? "" : formatSpread(spread(pairedRatios(servedRowsAt(b), servedRowsAt(prev))), 2);
      return [
        String(b),
        fmt(pick(s, (r) => r.p50)),
        fmt(pick(s, (r) => r.p99)),
        fmt(servedRowsAt(b)),
        gain,
        fmt(pick(s, (r) => meanUs(r.stats?.batches.get(b)))),
        fmt(pick(o, (r) => r.p50)),
        fmt(pick(o, (r) => r.mean)),
        fmt(pick(o, (r) => r.perSecond)),
        fmt(
          pairedDifferences(
            pick(s, (r) => r.p50),
            pick(o, (r) => r.p50),
          ),
        ),
      ];
    });
    console.log(
      table(
        [
          "batch",
          "served p50 µs",
          "p99 µs",
          "rows/s",
          "× prev",
          "compute_infer µs",
          "session.run p50 µs",
          "mean µs",
          "rows/s",
          "served − session.run p50",
        ],
        latencyRows,
      ),
    );
    const best = Math.max(...BATCH_SIZES.map((b) => median(servedRowsAt(b))));
    const knee = BATCH_SIZES.find((b) => median(servedRowsAt(b)) >= 0.9 * best);
    console.log(`knee: batch ${knee} is the smallest within 10% of the best served rows/s (${best.toFixed(0)})`);

    // 5. The ensemble's own cost.
    const ens = pick(ensemble, (p) => p.perSecond);
    const six = pick(sixCalls, (p) => p.perSecond);
    console.log(
      `\nensemble_add_sub vs the same six 'simple' calls from the client, c=${ENSEMBLE_CONCURRENCY} (${intro})\n`,
    );
    console.log(
      table(
        ["client", "results/s", "p50 µs", "p99 µs", "cores busy: server + client"],
        [
          ["ensemble_add_sub, one request", ensemble],
          ["six calls, chains 1→3→5 ∥ 2→4→6", sixCalls],
        ].map(([name, points]) => {
          const p = points as Point[];
          return [
            name as string,
            fmt(pick(p, (x) => x.perSecond)),
            fmt(pick(p, (x) => x.p50)),
            fmt(pick(p, (x) => x.p99)),
            `${median(pick(p, (x) => x.serverCores)).toFixed(2)} + ${median(pick(p, (x) => x.clientCores)).toFixed(2)}`,
          ];
        }),
      ),
    );
    const ensembleRatio = spread(pairedRatios(ens, six));
    console.log(`\nensemble / six calls: ${formatSpread(ensembleRatio, 2)}`);
    results.push({
      name: `ensemble: ensemble_add_sub/six calls, c=${ENSEMBLE_CONCURRENCY}`,
      measured: formatSpread(ensembleRatio, 2),
      goal: "> 1",
      verdict: Number.isNaN(ensembleRatio.median) ? "n/a" : ensembleRatio.median > 1 ? "PASS" : "MISS",
    });
    return results;
  } finally {
    await load?.stop();
    await server?.stop();
    await repository.remove();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(`Batching benchmark: ${machineLine()}`);
  const results = await measureBatching();
  console.log("\nSummary (median [min–max] over repetitions; PASS/MISS on the median)\n");
  console.log(
    table(
      ["target", "measured", "goal", "verdict"],
      results.map((r) => [r.name, r.measured, r.goal, r.verdict]),
    ),
  );
}
