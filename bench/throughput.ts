// Throughput: requests/second at concurrency 1, 4 and 16 for Galley (gRPC, binary HTTP, JSON HTTP),
// a bare connect-node ModelInfer handler, and a hand-written node:http + JSON + session.run server.
// Two scenarios, each with its own server processes: `simple` (64-byte tensors: the servers' fixed
// costs), then an FP32 identity at --elements values per request (65,536 = 256 KiB by default:
// the costs that grow with the tensor, where JSON and binary bodies part ways).
// Run: npx tsx bench/throughput.ts [--model=simple|identity] [--elements=N] [--reps=N] [--duration=S] [--warmup=S]
import { pathToFileURL } from "node:url";
import type { Target } from "./lib/callers.js";
import { IDENTITY, IDENTITY_ELEMENTS, writeIdentityRepository } from "./lib/identity.js";
import type { ThroughputResult } from "./lib/load-process.js";
import {
  check,
  machineLine,
  option,
  type ServerKind,
  startBench,
  type TargetResult,
  textOption,
  verdict,
} from "./lib/setup.js";
import { formatSpread, pairedRatios, spread, table } from "./lib/stats.js";
import { binaryBody, jsonBody, type ModelSpec, workloadOf } from "./lib/workload.js";

const CONCURRENCY = [1, 4, 16];

/** The issue's ratio targets (numerator / denominator ≥ bound), then context without a bound. */
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

/** Both scenarios (or the one `--model` names): `simple`, then the FP32 identity at `--elements`. */
export async function measureThroughput(): Promise<TargetResult[]> {
  const model = textOption("model", "");
  if (!["", "simple", "identity"].includes(model)) throw new Error(`--model=${model}: expected simple or identity`);
  const elements = option("elements", IDENTITY_ELEMENTS);
  if (!Number.isInteger(elements) || elements < 1)
    throw new Error(`--elements=${elements}: expected a positive integer`);
  const results: TargetResult[] = [];
  if (model !== "identity") results.push(...(await measureScenario({ model: "simple" })));
  if (model !== "simple") {
    const repository = await writeIdentityRepository();
    try {
      results.push(...(await measureScenario({ model: "identity", elements, repository: repository.dir })));
    } finally {
      await repository.remove();
    }
  }
  return results;
}

/** `256 KiB`, `1.2 MiB`: a byte count for the headings. */
function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const [value, unit] = n < 1024 * 1024 ? [n / 1024, "KiB"] : [n / 1024 / 1024, "MiB"];
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${unit}`;
}

/** One scenario: its own server processes (each loading only the scenario's model) and load process. */
async function measureScenario(spec: ModelSpec): Promise<TargetResult[]> {
  const reps = option("reps", 3);
  const durationMs = option("duration", 2) * 1000;
  const warmupMs = option("warmup", 0.5) * 1000;
  const identity = spec.model === "identity";
  const workload = workloadOf(spec);
  const tensorBytes = workload.inputs.reduce((n, i) => n + i.values.byteLength, 0);
  const title = identity
    ? `'${IDENTITY}', FP32 [${spec.elements}] in and out (${bytes(tensorBytes)} per tensor)`
    : `'${workload.model}'`;
  const bench = await startBench(["galley", "bare", "hand-written"], identity ? spec : undefined);
  const { galley, bare } = bench.ports;
  const handWritten = bench.ports["hand-written"];
  const w = identity ? { workload: spec } : {};
  // key, name, target, and the server process it loads (none: the target runs in the load process).
  const targets: [string, string, Target, ServerKind | undefined][] = [
    ["a", "galley gRPC ModelInfer", { kind: "grpc", port: galley.grpc ?? 0, ...w }, "galley"],
    ["a'", "galley gRPC, node:http2 client", { kind: "grpc-raw", port: galley.grpc ?? 0, ...w }, "galley"],
    ["b", "galley HTTP binary", { kind: "http-binary", port: galley.http ?? 0, ...w }, "galley"],
    ["c", "galley HTTP JSON", { kind: "http-json", port: galley.http ?? 0, ...w }, "galley"],
    ["d", "bare connect-node handler (gRPC)", { kind: "grpc", port: bare.grpc ?? 0, ...w }, "bare"],
    ["d'", "bare handler, node:http2 client", { kind: "grpc-raw", port: bare.grpc ?? 0, ...w }, "bare"],
    [
      "e",
      "hand-written node:http+JSON+session.run",
      { kind: "http-json", port: handWritten.http ?? 0, ...w },
      "hand-written",
    ],
    ["f", "galley core.infer in-process, no transport", { kind: "core", ...w }, undefined],
    ["g", "session.run in-process, no server", { kind: "ort", intraOpNumThreads: 1, ...w }, undefined],
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
    `\nThroughput on ${title}: ${reps} repetitions × ${durationMs / 1000} s per point (after ${warmupMs} ms warm-up)`,
  );
  if (identity) {
    const json = jsonBody(workload).byteLength;
    const binary = binaryBody(workload).body.byteLength;
    console.log(
      `request bodies: JSON ${bytes(json)}, binary ${bytes(binary)}; outputs checked equal to the inputs before measuring (the bare handler's: sizes only)`,
    );
  }
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
      const name = `throughput ${identity ? `identity ${bytes(tensorBytes)} ` : ""}${label}, c=${concurrency}`;
      results.push({ name, measured: formatSpread(s, 2), goal: `≥ ${bound}`, verdict: v });
      return `${formatSpread(s, 2)} ${v}`;
    });
    return [label, ...cells, bound === undefined ? "context" : `≥ ${bound}`];
  });
  console.log(`\nRatios on ${title}, paired by repetition: median [min–max] and verdict against the target\n`);
  console.log(table(["ratio", ...CONCURRENCY.map((c) => `c=${c}`), "target"], ratioRows));
  return results;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(machineLine());
  await measureThroughput();
}
