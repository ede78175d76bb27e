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
// Galley, started as `galley serve` would, with one method of a live object replaced per variant
// (lib/cpu-variant-process.ts), each under the same REST JSON load:
//
//   N(full)    the whole server
//   N(inline)  the model instances' `execute` computes the outputs on the event loop (no
//              worker-thread hop, no ONNX Runtime)
//   N(sched)   the model's `scheduler.enqueue` answers at once (no scheduler either)
//   N(canned)  `core.infer` answers a precomputed response (the frontend alone: HTTP parsing,
//              JSON decoding and encoding, the socket)
//   M          onnxruntime-node's session.run on `simple` (intraOpNumThreads 1, as Galley's), in a
//              process of its own, `concurrency` calls at a time: the model's own cost
//
//   frontend  = N(canned)                 core        = N(sched) − N(canned)
//   scheduler = N(inline) − N(sched)      backend hop = N(full) − N(inline) − M      model = M
//
// For REST binary and gRPC (loaded by the Connect client, and by @galley/client's lean `infer`,
// which costs the load process far less CPU) only the full server is run; their frontend row is
// N(full, proto) − (N(full, JSON) − N(canned, JSON)), i.e. what is left once the parts behind the
// frontend, as measured under JSON, are taken away.
//
// Context rows: `core.infer` called inside the server process (I: full, inline backend, scheduler
// canned, and H: `core.infer` itself canned, the cost of the loop that issues the calls). Under
// that load the pipeline is always full; over the network fewer requests are in flight at once
// and each one wakes sleeping threads (the event loop, the instance's worker, ONNX Runtime's), so
// the backend hop costs more per request there than in-process: the split uses the network runs.
//
// Each part is a difference of CPU per request between two runs of the same load, computed per
// repetition (paired) and reported as median [min–max]. Differences of noisy measurements can
// come out slightly negative for a part that costs almost nothing. "core" includes building the
// response and the statistics; "backend hop" is everything between the scheduler handing a
// request to an ONNX instance and getting its outputs back, minus the model's own run (the
// worker-thread message each way, thread wake-ups, the instance's bookkeeping). The machine's
// other work shows up in every number: with 2 cores shared with other engineers, read the spreads.
//
//   npx tsx bench/server-cpu.ts [--requests=10000] [--reps=3] [--concurrency=16]
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import type { CountLoadJob, CountLoadResult, CountLoadTarget } from "./lib/count-load-process.js";
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

/**
 * The same split by thread, in microseconds: the main thread's user and system time, and every
 * other thread's (V8's helpers for garbage collection and compilation, libuv, ONNX Runtime, workers).
 */
function threadCpuUs(pid: number): { mainUser: number; mainSys: number; others: number } {
  const at = { mainUser: 0, mainSys: 0, others: 0 };
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${task}/stat`, "utf8");
    } catch {
      continue; // a thread that ended between the listing and the read
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const [user, sys] = [Number(fields[11]), Number(fields[12])].map((t) => (t * 1e6) / TICKS_PER_SECOND);
    if (Number(task) === pid) {
      at.mainUser += user as number;
      at.mainSys += sys as number;
    } else at.others += (user as number) + (sys as number);
  }
  return at;
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

function network(key: string, label: string, variant: CpuVariant, kind: CountLoadTarget["kind"]): Measurement {
  const ports = child(variant).ready;
  const port = kind.startsWith("grpc") ? ports.grpc : ports.http;
  const target = { kind, port } as CountLoadTarget;
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
  network("grpc", "galley gRPC (Connect client)", "galley", "grpc"),
  network("grpc-galley", "galley gRPC (@galley/client)", "galley", "grpc-galley"),
  network("canned", "galley REST JSON, core.infer canned", "galley-canned-core", "http-json"),
  network("net-sched", "galley REST JSON, scheduler canned", "galley-canned-scheduler", "http-json"),
  network("net-inline", "galley REST JSON, inline backend", "galley-inline-backend", "http-json"),
  inProcess("full", "in-process core.infer", "galley"),
  inProcess("inline", "in-process core.infer, inline backend", "galley-inline-backend"),
  inProcess("sched", "in-process core.infer, scheduler canned", "galley-canned-scheduler"),
  inProcess("harness", "in-process loop, core.infer canned", "galley-canned-core"),
  inProcess("model", "session.run, intraOpNumThreads 1", "ort"),
];

const cpu: Record<string, number[]> = {};
const rps: Record<string, number[]> = {};
const threads: Record<string, { mainUser: number[]; mainSys: number[]; others: number[] }> = {};
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
      const threadsBefore = threadCpuUs(pid);
      const wallMs = await m.run(requests);
      cpu[m.key]?.push((processCpuUs(pid) - before) / requests);
      const threadsAfter = threadCpuUs(pid);
      threads[m.key] ??= { mainUser: [], mainSys: [], others: [] };
      const split = threads[m.key] as { mainUser: number[]; mainSys: number[]; others: number[] };
      for (const part of ["mainUser", "mainSys", "others"] as const)
        split[part].push((threadsAfter[part] - threadsBefore[part]) / requests);
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

console.log("\nthe same by thread (µs/request): the main thread's user and system time, then all other threads\n");
console.log(
  table(
    ["measurement", "main user", "main system", "other threads"],
    measurements
      .filter((m) => threads[m.key])
      .map((m) => {
        const t = threads[m.key] as { mainUser: number[]; mainSys: number[]; others: number[] };
        return [m.label, fmt(t.mainUser), fmt(t.mainSys), fmt(t.others)];
      }),
  ),
);

const frontend = of("canned");
const core = per((at) => at("net-sched") - at("canned"));
const scheduler = per((at) => at("net-inline") - at("net-sched"));
const hop = per((at) => at("json") - at("net-inline") - at("model"));
const model = of("model");
const behind = per((at) => at("json") - at("canned"));
const frontendOf = (key: string) => per((at) => at(key) - (at("json") - at("canned")));
console.log("\nwhere Galley's CPU per request goes (µs, median [min–max] of per-rep differences)\n");
console.log(
  table(
    ["part", "REST JSON", "REST binary", "gRPC", "gRPC (@galley/client)"],
    [
      ["frontend", fmt(frontend), fmt(frontendOf("binary")), fmt(frontendOf("grpc")), fmt(frontendOf("grpc-galley"))],
      ["core", fmt(core), "same", "same", "same"],
      ["scheduler", fmt(scheduler), "same", "same", "same"],
      ["backend hop", fmt(hop), "same", "same", "same"],
      ["model (session.run)", fmt(model), "same", "same", "same"],
      ["behind the frontend (sum of the four)", fmt(behind), "same", "same", "same"],
      ["total (measured)", fmt(of("json")), fmt(of("binary")), fmt(of("grpc")), fmt(of("grpc-galley"))],
    ],
  ),
);
const inProcessHop = per((at) => at("full") - at("inline") - at("model"));
console.log(
  `\nin-process context: core ${fmt(per((at) => at("sched") - at("harness")))}, scheduler ` +
    `${fmt(per((at) => at("inline") - at("sched")))}, backend hop ${fmt(inProcessHop)} µs/req ` +
    "(core.infer called in the server process, so the pipeline is always full)",
);
const ratio = pairedRatios(of("json"), of("hw"));
const ratioSpread = spread(ratio);
console.log(
  `\nGalley REST JSON / hand-written server CPU per request: ${formatSpread(ratioSpread, 2)} ` +
    `(target ≤ 1.5: ${verdict(ratioSpread.median, 1.5, "<=")}); hand-written ${fmt(of("hw"))} µs/req`,
);
