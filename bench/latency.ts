// Added latency: p50/p99 of sequential ModelInfer calls on `simple` over gRPC and binary HTTP,
// against onnxruntime-node's session.run in-process. Run: npx tsx bench/latency.ts
import { pathToFileURL } from "node:url";
import type { Target } from "./lib/callers.js";
import type { LatencyResult } from "./lib/load-process.js";
import { check, machineLine, option, startBench, type TargetResult, verdict } from "./lib/setup.js";
import { formatSpread, pairedDifferences, spread, table } from "./lib/stats.js";

const ADDED_P50_TARGET_US = 60;
const BASELINES = ["session.run, default options", "session.run, intraOpNumThreads 1"];

export async function measureLatency(): Promise<TargetResult[]> {
  const reps = option("reps", 5);
  const samples = option("samples", 1000);
  const warmup = option("warmup", 200);
  const bench = await startBench(["galley", "bare", "hand-written"]);
  const { galley, bare } = bench.ports;
  const handWritten = bench.ports["hand-written"];
  const targets: [string, Target][] = [
    [BASELINES[0] as string, { kind: "ort" }],
    [BASELINES[1] as string, { kind: "ort", intraOpNumThreads: 1 }],
    ["worker postMessage echo (no model)", { kind: "worker-echo" }],
    ["galley core.infer in-process", { kind: "core" }],
    ["galley gRPC, Connect client", { kind: "grpc", port: galley.grpc ?? 0 }],
    ["galley gRPC, node:http2 client", { kind: "grpc-raw", port: galley.grpc ?? 0 }],
    ["galley HTTP binary", { kind: "http-binary", port: galley.http ?? 0 }],
    ["galley HTTP JSON", { kind: "http-json", port: galley.http ?? 0 }],
    ["bare handler gRPC, Connect client", { kind: "grpc", port: bare.grpc ?? 0 }],
    ["bare handler gRPC, node:http2 client", { kind: "grpc-raw", port: bare.grpc ?? 0 }],
    ["hand-written node:http JSON", { kind: "http-json", port: handWritten.http ?? 0 }],
  ];
  const live: [string, Target][] = [];
  for (const [name, target] of targets) {
    const valuesMatter = target.kind !== "worker-echo" && !name.startsWith("bare");
    if (target.kind === "worker-echo" || (await check(bench, name, target, valuesMatter))) live.push([name, target]);
  }

  // Repetitions interleave the targets, so drift on a noisy machine spreads over all of them.
  const p50s = new Map<string, number[]>(live.map(([name]) => [name, []]));
  const p99s = new Map<string, number[]>(live.map(([name]) => [name, []]));
  for (let rep = 0; rep < reps; rep++) {
    for (const [name, target] of live) {
      const r = await bench.run<LatencyResult>({ type: "latency", target, warmup, samples });
      p50s.get(name)?.push(r.p50);
      p99s.get(name)?.push(r.p99);
    }
  }
  await bench.stop();

  const p50 = (name: string) => p50s.get(name) ?? [];
  // The baseline of each repetition is the faster of the two session.run settings.
  const baseline = p50(BASELINES[0] as string).map((v, i) => Math.min(v, p50(BASELINES[1] as string)[i] ?? v));
  const added = (name: string) => spread(pairedDifferences(p50(name), baseline));
  const rows = live.map(([name]) => [
    name,
    formatSpread(spread(p50(name))),
    formatSpread(spread(p99s.get(name) ?? [])),
    formatSpread(added(name)),
  ]);
  console.log(`\nLatency on 'simple', concurrency 1: ${reps} repetitions × ${samples} calls (after ${warmup} warm-up)`);
  console.log("µs: median of the repetitions [min–max]; added = p50 − p50(faster session.run), paired by repetition\n");
  console.log(table(["target", "p50 µs", "p99 µs", "added p50 µs"], rows));
  console.log("\nGalley's share over a bare connect-node handler, same client (p50 difference, paired):");
  for (const client of ["Connect client", "node:http2 client"]) {
    const own = spread(pairedDifferences(p50(`galley gRPC, ${client}`), p50(`bare handler gRPC, ${client}`)));
    console.log(`  gRPC, ${client}: ${formatSpread(own)} µs`);
  }

  return ["galley gRPC, Connect client", "galley HTTP binary"].map((name) => ({
    name: `added p50, ${name.replace("galley ", "")}`,
    measured: `${formatSpread(added(name))} µs`,
    goal: `≤ ${ADDED_P50_TARGET_US} µs`,
    verdict: verdict(added(name).median, ADDED_P50_TARGET_US, "<="),
  }));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(machineLine());
  const results = await measureLatency();
  console.log();
  for (const r of results) console.log(`${r.verdict}  ${r.name}: ${r.measured} (target ${r.goal})`);
}
