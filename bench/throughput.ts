// Throughput: requests/second at concurrency 1, 4 and 16 for Galley (gRPC, binary HTTP, JSON HTTP),
// a bare connect-node ModelInfer handler, and a hand-written node:http + JSON + session.run server.
// Run: npx tsx bench/throughput.ts
import { pathToFileURL } from "node:url";
import type { Target } from "./lib/callers.js";
import type { ThroughputResult } from "./lib/load-process.js";
import { check, machineLine, option, type ServerKind, startBench, type TargetResult, verdict } from "./lib/setup.js";
import { formatSpread, pairedRatios, spread, table } from "./lib/stats.js";

const CONCURRENCY = [1, 4, 16];

/** The ratio targets (numerator / denominator ≥ bound), then context without a bound. */
const RATIOS: [string, string, string, number | undefined][] = [
  ["(a)/(d)", "a", "d", 0.8],
  ["(c)/(e)", "c", "e", 0.9],
  ["(b)/(e)", "b", "e", 3],
  ["(a)/(e)", "a", "e", 3],
  ["(a')/(d')", "a'", "d'", undefined],
  ["(d)/(e)", "d", "e", undefined],
  ["(d')/(e)", "d'", "e", undefined],
  ["(a)/(f)", "a", "f", undefined],
  ["(c)/(f)", "c", "f", undefined],
  ["(f)/(g)", "f", "g", undefined],
];

export async function measureThroughput(): Promise<TargetResult[]> {
  const reps = option("reps", 3);
  const durationMs = option("duration", 2) * 1000;
  const warmupMs = option("warmup", 0.5) * 1000;
  const bench = await startBench(["galley", "bare", "hand-written"]);
  const { galley, bare } = bench.ports;
  const handWritten = bench.ports["hand-written"];
  // key, name, target, and the server process it loads (none: the target runs in the load process).
  const targets: [string, string, Target, ServerKind | undefined][] = [
    ["a", "galley gRPC ModelInfer", { kind: "grpc", port: galley.grpc ?? 0 }, "galley"],
    ["a'", "galley gRPC, node:http2 client", { kind: "grpc-raw", port: galley.grpc ?? 0 }, "galley"],
    ["b", "galley HTTP binary", { kind: "http-binary", port: galley.http ?? 0 }, "galley"],
    ["c", "galley HTTP JSON", { kind: "http-json", port: galley.http ?? 0 }, "galley"],
    ["d", "bare connect-node handler (gRPC)", { kind: "grpc", port: bare.grpc ?? 0 }, "bare"],
    ["d'", "bare handler, node:http2 client", { kind: "grpc-raw", port: bare.grpc ?? 0 }, "bare"],
    [
      "e",
      "hand-written node:http+JSON+session.run",
      { kind: "http-json", port: handWritten.http ?? 0 },
      "hand-written",
    ],
    ["f", "galley core.infer in-process, no transport", { kind: "core" }, undefined],
    ["g", "session.run in-process, no server", { kind: "ort", intraOpNumThreads: 1 }, undefined],
  ];
  const live: typeof targets = [];
  for (const t of targets) if (await check(bench, t[1], t[2], !t[0].startsWith("d"))) live.push(t);

  // Per point, one value per repetition; repetitions interleave every point.
  const perPoint = () => new Map<string, number[][]>(live.map(([key]) => [key, CONCURRENCY.map(() => [])]));
  const rps = perPoint();
  const serverCpu = perPoint();
  const clientCpu = perPoint();
  for (let rep = 0; rep < reps; rep++) {
    for (const [ci, concurrency] of CONCURRENCY.entries()) {
      for (const [key, name, target, server] of live) {
        const before = server ? await bench.cpu(server) : Number.NaN;
        const r = await bench.run<ThroughputResult>({ type: "throughput", target, concurrency, warmupMs, durationMs });
        const after = server ? await bench.cpu(server) : Number.NaN;
        if (r.errors > 0) console.error(`${name} at concurrency ${concurrency}: ${r.errors} errors`);
        rps.get(key)?.[ci]?.push(r.rps);
        serverCpu.get(key)?.[ci]?.push((after - before) / r.total);
        clientCpu.get(key)?.[ci]?.push(r.cpuUs / r.total);
      }
    }
  }
  await bench.stop();

  const series = (key: string, ci: number) => rps.get(key)?.[ci] ?? [];
  console.log(
    `\nThroughput on 'simple': ${reps} repetitions × ${durationMs / 1000} s per point (after ${warmupMs} ms warm-up)`,
  );
  console.log("requests/s: median of the repetitions [min–max]\n");
  console.log(
    table(
      ["target", ...CONCURRENCY.map((c) => `c=${c}`)],
      live.map(([key, name]) => [
        `(${key}) ${name}`,
        ...CONCURRENCY.map((_, ci) => formatSpread(spread(series(key, ci)), 0)),
      ]),
    ),
  );

  const cpuCell = (key: string, ci: number) => {
    const server = spread(serverCpu.get(key)?.[ci] ?? []).median;
    const client = spread(clientCpu.get(key)?.[ci] ?? []).median;
    return `${Number.isNaN(server) ? "—" : server.toFixed(0)} / ${client.toFixed(0)}`;
  };
  console.log("\nCPU µs per request, server process / load process (all threads; medians; warm-up included)\n");
  console.log(
    table(
      ["target", ...CONCURRENCY.map((c) => `c=${c}`)],
      live.map(([key, name]) => [`(${key}) ${name}`, ...CONCURRENCY.map((_, ci) => cpuCell(key, ci))]),
    ),
  );

  const results: TargetResult[] = [];
  const ratioRows = RATIOS.map(([label, a, b, bound]) => {
    const cells = CONCURRENCY.map((concurrency, ci) => {
      const s = spread(pairedRatios(series(a, ci), series(b, ci)));
      if (bound === undefined) return formatSpread(s, 2);
      const v = verdict(s.median, bound, ">=");
      const name = `throughput ${label}, c=${concurrency}`;
      results.push({ name, measured: formatSpread(s, 2), goal: `≥ ${bound}`, verdict: v });
      return `${formatSpread(s, 2)} ${v}`;
    });
    return [label, ...cells, bound === undefined ? "context" : `≥ ${bound}`];
  });
  console.log("\nRatios, paired by repetition: median [min–max] and verdict against the target\n");
  console.log(table(["ratio", ...CONCURRENCY.map((c) => `c=${c}`), "target"], ratioRows));
  return results;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(machineLine());
  await measureThroughput();
}
