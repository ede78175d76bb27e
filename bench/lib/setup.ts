// What both benchmarks share: options, starting the server and load-generator processes, and
// checking each target answers correctly before it is measured.
import { availableParallelism, loadavg } from "node:os";
import type { Target } from "./callers.js";
import { type Child, startChild } from "./ipc.js";
import type { LoadJob } from "./load-process.js";
import type { ModelSpec, OutputCheck } from "./workload.js";

/** `--name=value` from the command line, else `BENCH_NAME`, else the default. */
export function option(name: string, fallback: number): number {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`));
  const raw = flag?.slice(name.length + 3) ?? process.env[`BENCH_${name.toUpperCase()}`];
  const value = raw === undefined ? Number.NaN : Number(raw);
  return Number.isFinite(value) ? value : fallback;
}

/** A word option, the same way: `--name=value`, else `BENCH_NAME`, else the default. */
export function textOption(name: string, fallback: string): string {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`));
  return flag?.slice(name.length + 3) ?? process.env[`BENCH_${name.toUpperCase()}`] ?? fallback;
}

/**
 * The V8 flag `galley serve` runs with (src/cli/galley.ts; `npm start` and the container pass it),
 * for the scripts that measure a Galley process as served: its young generation capped.
 */
export const GALLEY_SERVE_NODE_FLAGS = ["--max-semi-space-size=8"];

export type ServerKind = "galley" | "bare" | "hand-written";
export type Ports = { grpc?: number; http?: number };

/** Servers (one process each) and the load generator (another process). */
export interface Bench {
  ports: Record<ServerKind, Ports>;
  load: Child<null>;
  run<T>(job: LoadJob): Promise<T>;
  /** A server process's CPU time so far (all its threads), in microseconds. */
  cpu(kind: ServerKind): Promise<number>;
  stop(): Promise<void>;
}

/** Start the servers; with a workload, each serves that model instead of `simple`. */
export async function startBench(kinds: readonly ServerKind[], workload?: ModelSpec): Promise<Bench> {
  const args = workload ? [JSON.stringify(workload)] : [];
  const servers = await Promise.all(
    kinds.map((kind) => startChild<Ports>(new URL("./server-process.ts", import.meta.url), [kind, ...args])),
  );
  const load = await startChild<null>(new URL("./load-process.ts", import.meta.url));
  const ports = Object.fromEntries(kinds.map((kind, i) => [kind, servers[i]?.ready ?? {}])) as Record<
    ServerKind,
    Ports
  >;
  return {
    ports,
    load,
    run: (job) => load.call(job),
    cpu: (kind) => servers[kinds.indexOf(kind)]?.call<number>({ type: "cpu" }) ?? Promise.resolve(Number.NaN),
    async stop() {
      await load.stop();
      await Promise.all(servers.map((s) => s.stop()));
    },
  };
}

/**
 * One call through the load generator; the target is measured only when it answers with the
 * right values (the bare handler answers zeros of the right size, so only sizes are checked).
 * The load process compares every element with the target's workload (`simple`'s sum and
 * difference, or the identity's input).
 */
export async function check(bench: Bench, name: string, target: Target, valuesMatter = true): Promise<boolean> {
  try {
    const { lengths, sizesOk, valuesOk, shown } = await bench.run<OutputCheck>({ type: "check", target });
    if (sizesOk && (valuesOk || !valuesMatter)) return true;
    console.error(`skipping ${name}: wrong outputs (${lengths.join(" and ")} values) ${shown}`);
  } catch (error) {
    console.error(`skipping ${name}: ${((error as Error).message.split("\n")[0] ?? "").slice(0, 300)}`);
  }
  return false;
}

/** `PASS` or `MISS` against a target that is a lower (`>=`) or upper (`<=`) bound. */
export function verdict(value: number, bound: number, direction: ">=" | "<="): string {
  if (Number.isNaN(value)) return "n/a";
  return (direction === ">=" ? value >= bound : value <= bound) ? "PASS" : "MISS";
}

/** One target of the spec, as measured. */
export interface TargetResult {
  name: string;
  measured: string;
  goal: string;
  verdict: string;
}

/** Node version, CPUs and the 1-minute load average: other work on the machine skews every number. */
export function machineLine(): string {
  const load = loadavg()[0]?.toFixed(2);
  return `node ${process.version}, ${availableParallelism()} CPUs (clients and servers share them), load average ${load}`;
}
