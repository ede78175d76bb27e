// Server CPU per request on `simple` at concurrency 16, and where it goes.
//
// What is measured: the CPU time (utime + stime, every thread) of a server process, read from
// /proc/<pid>/stat before and after a fixed number of requests, divided by that number. The load
// comes from another process (lib/count-load-process.ts: exactly `--requests` requests,
// `--concurrency` at a time, through the same callers as the other benchmarks), so nothing of the
// client is counted. Each server variant is its own process (lib/cpu-variant-process.ts), idle
// while the others are measured; repetitions interleave the variants.
//
// How the split is made, from outside the server (no instrumentation in Galley's code): the same
// Galley, started as `galley serve` would, with one method of a live object replaced per variant.
//
//   N(proto)   the full server over the network: REST JSON, REST binary, gRPC
//   N(canned)  REST JSON with `core.infer` answering a precomputed response (the frontend alone;
//              printed as a cross-check of the frontend row)
//   I(full)    core.infer called inside the server process, `concurrency` at a time, real model
//   I(inline)  the same with the model instances' `execute` computing the outputs on the event loop
//              (no worker-thread hop, no ONNX Runtime)
//   I(sched)   the same with the model's `scheduler.enqueue` answering at once (no scheduler)
//   H          the same with `core.infer` itself answering at once: the cost of the in-process
//              loop that issues the calls, subtracted from every I
//   M          onnxruntime-node's session.run on `simple` (intraOpNumThreads 1, as Galley's) in
//              a process of its own: the model's own cost
//
//   frontend(proto) = N(proto) − (I(full) − H)      core        = I(sched) − H
//   scheduler       = I(inline) − I(sched)          backend hop = I(full) − I(inline) − M
//   model           = M
//
// Each part is a difference of CPU per request between two runs of the same load, computed per
// repetition (paired) and reported as median [min–max]. Differences of noisy measurements can
// come out slightly negative for a part that costs almost nothing. "core" includes building the
// response and the statistics; "backend hop" is everything between the scheduler handing a batch
// to an ONNX instance and getting its outputs back, minus the model's own run (the worker-thread
// message each way, copying tensors, the instance's bookkeeping). The machine's other work shows
// up in every number: with 2 cores shared with other engineers, read the spreads.
//
//   npx tsx bench/server-cpu.ts [--requests=10000] [--reps=3] [--concurrency=16]
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import type { Target } from "./lib/callers.js";
import type { CountLoadJob, CountLoadResult } from "./lib/count-load-process.js";
import type { CpuVariant, CpuVariantJob } from "./lib/cpu-variant-process.js";
import { type Child, startChild } from "./lib/ipc.js";
import { machineLine, option, verdict } from "./lib/setup.js";
import { formatSpread, pairedRatios, spread, table } from "./lib/stats.js";

const requests = option("requests", 10_000);
const reps = option("reps", 3);
const concurrency = option("concurrency", 16);
const TICKS_PER_SECOND = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;

type Ports = { http?: number; grpc?: number; pid: number };

/** utime + stime of a process (all its threads), in microseconds. */
function processCpuUs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after "pid (comm) ": state is field 3, utime field 14, stime field 15.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / TICKS_PER_SECOND;
}

const variants: CpuVariant[] = [
  "hand-written",
  "galley",
  "galley-canned-core",
  "galley-canned-scheduler",
  "galley-inline-backend",
  "ort",
];
const children = new Map<CpuVariant, Child<Ports>>();
// One at a time: loading several ONNX sessions at once on 2 cores only slows each down.
for (const v of variants) {
  children.set(v, await startChild<Ports>(new URL("./lib/cpu-variant-process.ts", import.meta.url), [v]));
}
const load = await startChild<null>(new URL("./lib/count-load-process.ts", import.meta.url));
const child = (v: CpuVariant) => children.get(v) as Child<Ports>;

/** One measurement: which process's CPU to read, and how to make it do `n` requests. */
interface Measurement {
  key: string;
  label: string;
  variant: CpuVariant;
  run(n: number): Promise<number>;
}

function network(key: string, label: string, variant: CpuVariant, kind: Target["kind"]): Measurement {
  const ports = child(variant).ready;
  const port = kind === "grpc" || kind === "grpc-raw" ? ports.grpc : ports.http;
  const target = { kind, port } as Target;
  return {
    key,
    label,
    variant,
    async run(n) {
      const job: CountLoadJob = { target, concurrency, requests: n };
      const result = await load.call<CountLoadResult>(job);
      if (result.errors > 0) throw new Error(`${label}: ${result.errors} errors, first: ${result.firstError}`);
      return result.wallMs;
    },
  };
}

function inProcess(key: string, label: string, variant: CpuVariant): Measurement {
  return {
    key,
    label,
    variant,
    run: (n) => child(variant).call<number>({ type: "inproc", concurrency, requests: n } satisfies CpuVariantJob),
  };
}

const measurements: Measurement[] = [
  network("hw", "hand-written node:http JSON", "hand-written", "http-json"),
  network("json", "galley REST JSON", "galley", "http-json"),
  network("binary", "galley REST binary", "galley", "http-binary"),
  network("grpc", "galley gRPC", "galley", "grpc"),
  network("canned", "galley REST JSON, core.infer canned", "galley-canned-core", "http-json"),
  inProcess("full", "in-process core.infer", "galley"),
  inProcess("inline", "in-process core.infer, inline backend", "galley-inline-backend"),
  inProcess("sched", "in-process core.infer, scheduler canned", "galley-canned-scheduler"),
  inProcess("harness", "in-process loop, core.infer canned", "galley-canned-core"),
  inProcess("model", "session.run, intraOpNumThreads 1", "ort"),
];

const cpu: Record<string, number[]> = {};
const rps: Record<string, number[]> = {};
try {
  for (const m of measurements) {
    await m.run(Math.ceil(requests / 4)); // warm-up: JIT, connections, ONNX Runtime's first runs
    cpu[m.key] = [];
    rps[m.key] = [];
  }
  for (let rep = 0; rep < reps; rep++) {
    for (const m of measurements) {
      const pid = child(m.variant).ready.pid;
      const before = processCpuUs(pid);
      const wallMs = await m.run(requests);
      cpu[m.key]?.push((processCpuUs(pid) - before) / requests);
      rps[m.key]?.push(requests / (wallMs / 1000));
    }
  }
} finally {
  await load.stop();
  for (const c of children.values()) await c.stop();
}

const of = (key: string) => cpu[key] ?? [];
/** Per repetition: a combination of measurements. */
const per = (f: (at: (key: string) => number) => number) =>
  Array.from({ length: reps }, (_, i) => f((key) => of(key)[i] as number));
const fmt = (values: number[], digits = 1) => formatSpread(spread(values), digits);

console.log(`server CPU per request, simple, concurrency ${concurrency}, ${requests} requests × ${reps} reps`);
console.log(`${machineLine()}; CPU from /proc/<pid>/stat (utime+stime, ${TICKS_PER_SECOND} ticks/s)\n`);
console.log(
  table(
    ["measurement", "server CPU µs/req", "req/s"],
    measurements.map((m) => [m.label, fmt(of(m.key)), fmt(rps[m.key] ?? [], 0)]),
  ),
);

const core = per((at) => at("sched") - at("harness"));
const scheduler = per((at) => at("inline") - at("sched"));
const hop = per((at) => at("full") - at("inline") - at("model"));
const model = of("model");
const frontend = (key: string) => per((at) => at(key) - (at("full") - at("harness")));
console.log(`\nwhere Galley's CPU per request goes (µs, median [min–max] of per-rep differences)\n`);
console.log(
  table(
    ["part", "REST JSON", "REST binary", "gRPC"],
    [
      ["frontend", fmt(frontend("json")), fmt(frontend("binary")), fmt(frontend("grpc"))],
      ["core", fmt(core), "same", "same"],
      ["scheduler", fmt(scheduler), "same", "same"],
      ["backend hop", fmt(hop), "same", "same"],
      ["model (session.run)", fmt(model), "same", "same"],
      ["total (measured)", fmt(of("json")), fmt(of("binary")), fmt(of("grpc"))],
      ["frontend alone (core.infer canned)", fmt(of("canned")), "", ""],
    ],
  ),
);
const ratio = pairedRatios(of("json"), of("hw"));
const ratioSpread = spread(ratio);
console.log(
  `\nGalley REST JSON / hand-written server CPU per request: ${formatSpread(ratioSpread, 2)} ` +
    `(target ≤ 1.5: ${verdict(ratioSpread.median, 1.5, "<=")}); hand-written ${fmt(of("hw"))} µs/req`,
);
