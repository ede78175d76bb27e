// Before/after in one run (issue 21, item 1): Galley from two builds (`--before=<checkout>`, a
// worktree of an earlier commit with packages/server built, and this checkout) and the
// hand-written server, all serving `simple`, each in its own process, idle while the others are
// measured. For each concurrency (1, 4, 16) and protocol (REST JSON, REST binary, gRPC through
// @galley/client's lean infer; the hand-written server speaks JSON only), a fixed number of
// requests from one load process (lib/count-load-process.ts); server CPU per request from
// /proc/<pid>/stat and requests/s. Repetitions interleave every point (every other one in reverse
// order); ratios are paired per repetition: throughput / the hand-written server's at the same
// concurrency (targets: JSON ≥ 0.9, binary and gRPC ≥ 1.0), and CPU per request / the
// hand-written server's at c = 16 (target ≤ 1.5).
//
//   git worktree add /tmp/before <commit> && ln -s $PWD/node_modules /tmp/before/node_modules
//   (cd /tmp/before/packages/server && npx tsc -p tsconfig.build.json)
//   npx tsx bench/ab-server.ts --before=/tmp/before [--after=<checkout>] [--requests=3000] [--reps=3]
//
// `--after` defaults to this checkout; give a worktree of the commit to measure when the checkout
// holds other work in progress. `--load=h2load` sends the load from h2load (lib/h2load.ts, Debian's
// nghttp2-client) instead of a Node process: a client in C, as the wrk and perf_analyzer
// are, whose own CPU does not hold the servers' rate down on 2 shared cores (a Node gRPC client
// spends more CPU per call than Galley's server does). Galley's statistics must then count every
// request as a success (gRPC statuses travel in trailers, which h2load does not read).
// `--floors` (with `--load=h2load`) adds two gRPC responders that do no work
// (servers/http2-floors.ts): node:http2, and HTTP/2 framing written directly on a socket. They show
// what HTTP/2 costs before any server code runs, against the hand-written HTTP/1.1 server.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import type { CountLoadResult, CountLoadTarget } from "./lib/count-load-process.js";
import { createH2load } from "./lib/h2load.js";
import { type Child, startChild } from "./lib/ipc.js";
import { GALLEY_SERVE_NODE_FLAGS, machineLine, option, textOption } from "./lib/setup.js";
import { formatSpread, median, pairedRatios, spread, table } from "./lib/stats.js";

const requests = option("requests", 3000);
const reps = option("reps", 3);
const before = textOption("before", "");
/** The build measured as "after": another checkout, or `current` (this one's @galley/server). */
const after = textOption("after", "current");
const loadKind = textOption("load", "node");
if (loadKind !== "node" && loadKind !== "h2load") throw new Error(`--load=${loadKind}: node or h2load`);
const floors = process.argv.includes("--floors");
if (floors && loadKind !== "h2load") throw new Error("--floors needs --load=h2load");
const CONCURRENCY = [1, 4, 16];
const TICKS = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;

type Ready = { http: number; grpc?: number; pid: number };
const cpuUs = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / TICKS;
};

const servers = new Map<string, Child<Ready>>();
servers.set("hand-written", await startChild<Ready>(new URL("./lib/hand-written-simple-process.ts", import.meta.url)));
/** Both builds run as `galley serve` runs them. */
const served = { NODE_OPTIONS: GALLEY_SERVE_NODE_FLAGS.join(" ") };
const galleyProcess = new URL("./lib/galley-build-process.ts", import.meta.url);
if (before) servers.set("before", await startChild<Ready>(galleyProcess, [before], served));
servers.set("after", await startChild<Ready>(galleyProcess, [after], served));
/** Servers without Galley's statistics to check counts against. */
const uncounted = new Set(["hand-written"]);
if (floors) {
  const floorProcess = new URL("./lib/http2-floor-process.ts", import.meta.url);
  for (const kind of ["node-http2", "minimal"]) {
    servers.set(`${kind} floor`, await startChild<Ready>(floorProcess, [kind]));
    uncounted.add(`${kind} floor`);
  }
}
const load = await startChild<null>(new URL("./lib/count-load-process.ts", import.meta.url));
const h2load = loadKind === "h2load" ? createH2load() : undefined;

interface Point {
  key: string;
  server: string;
  protocol: "json" | "binary" | "grpc";
}
const points: Point[] = [{ key: "hand-written json", server: "hand-written", protocol: "json" }];
for (const server of before ? ["before", "after"] : ["after"])
  for (const protocol of ["json", "binary", "grpc"] as const)
    points.push({ key: `${server} ${protocol}`, server, protocol });
if (floors)
  for (const server of ["node-http2 floor", "minimal floor"])
    points.push({ key: `${server} grpc`, server, protocol: "grpc" });

const target = (p: Point): CountLoadTarget => {
  const ready = servers.get(p.server)?.ready as Ready;
  if (p.protocol === "grpc") return { kind: "grpc-galley", port: ready.grpc as number };
  return { kind: p.protocol === "json" ? "http-json" : "http-binary", port: ready.http };
};
/** Galley's success and failure counts for `simple` so far (every protocol is counted there). */
async function galleyCounts(p: Point): Promise<{ success: number; fail: number }> {
  const ready = servers.get(p.server)?.ready as Ready;
  const res = await fetch(`http://127.0.0.1:${ready.http}/v2/models/simple/stats`);
  const body = (await res.json()) as {
    model_stats: { inference_stats: { success: { count: number }; fail: { count: number } } }[];
  };
  const stats = body.model_stats[0]?.inference_stats;
  return { success: stats?.success.count ?? Number.NaN, fail: stats?.fail.count ?? Number.NaN };
}

/** `requests` requests of one point, `concurrency` at a time, from the chosen load generator. */
async function send(p: Point, concurrency: number, requests: number): Promise<CountLoadResult> {
  if (!h2load) return load.call<CountLoadResult>({ target: target(p), concurrency, requests });
  const ready = servers.get(p.server)?.ready as Ready;
  const port = (p.protocol === "grpc" ? ready.grpc : ready.http) as number;
  const before = uncounted.has(p.server) ? undefined : await galleyCounts(p);
  const result = await h2load.load({ protocol: p.protocol, port }, concurrency, requests);
  if (before && result.errors === 0) {
    const now = await galleyCounts(p);
    if (now.success - before.success !== requests || now.fail !== before.fail)
      return {
        ...result,
        errors: requests,
        firstError: `statistics: ${now.success - before.success} successes, ${now.fail - before.fail} failures`,
      };
  }
  return result;
}

const cpu = new Map<string, number[]>();
const rps = new Map<string, number[]>();
const push = (m: Map<string, number[]>, key: string, v: number) => m.set(key, [...(m.get(key) ?? []), v]);
try {
  for (const p of points) for (const c of CONCURRENCY) await send(p, c, requests / 4);
  for (let rep = 0; rep < reps; rep++) {
    for (const c of CONCURRENCY) {
      // Every other repetition in reverse, so that no build is always measured right after another.
      for (const p of rep % 2 === 0 ? points : [...points].reverse()) {
        const pid = servers.get(p.server)?.ready.pid as number;
        const start = cpuUs(pid);
        const result = await send(p, c, requests);
        if (result.errors > 0) throw new Error(`${p.key}: ${result.errors} errors, first: ${result.firstError}`);
        push(cpu, `${p.key}/${c}`, (cpuUs(pid) - start) / requests);
        push(rps, `${p.key}/${c}`, requests / (result.wallMs / 1000));
      }
    }
  }
} finally {
  h2load?.close();
  await load.stop();
  for (const s of servers.values()) await s.stop();
}

const f = (v: number[] | undefined, d = 0) => formatSpread(spread(v ?? []), d);
console.log(`simple, ${requests} requests per point × ${reps} reps, load from ${loadKind}; ${machineLine()}`);
console.log("CPU from /proc/<pid>/stat (utime+stime of the server process)\n");
console.log(
  table(
    ["server, protocol", ...CONCURRENCY.flatMap((c) => [`req/s c=${c}`, `CPU µs/req c=${c}`])],
    points.map((p) => [
      p.key,
      ...CONCURRENCY.flatMap((c) => [f(rps.get(`${p.key}/${c}`)), f(cpu.get(`${p.key}/${c}`))]),
    ]),
  ),
);
const hw = (c: number) => rps.get(`hand-written json/${c}`) ?? [];
console.log("\nthroughput / hand-written (paired per repetition), and CPU per request / hand-written at c=16\n");
const rows = points.slice(1).map((p) => {
  const bound = p.protocol === "json" ? 0.9 : 1.0;
  const galley = !uncounted.has(p.server);
  const ratios = CONCURRENCY.map((c) => pairedRatios(rps.get(`${p.key}/${c}`) ?? [], hw(c)));
  const cpuRatio = pairedRatios(cpu.get(`${p.key}/16`) ?? [], cpu.get("hand-written json/16") ?? []);
  const pass = ratios.every((r) => median(r) >= bound) ? "PASS" : "MISS";
  return [
    p.key,
    ...ratios.map((r) => f(r, 2)),
    galley ? `≥ ${bound.toFixed(1)} ${p.server === "after" ? pass : ""}` : "(no work done)",
    `${f(cpuRatio, 2)}${p.server === "after" ? (median(cpuRatio) <= 1.5 ? " PASS" : " MISS") : ""}`,
  ];
});
console.log(table(["", "c=1", "c=4", "c=16", "target", "CPU/req ÷ hand-written, c=16 (≤ 1.5)"], rows));
