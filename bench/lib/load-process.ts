// Child entry: the load generator. It runs in its own process so that the servers' event loops
// and the client's never share a thread; jobs come from the benchmark script over IPC.
import { performance } from "node:perf_hooks";
import { type Caller, createCaller, type Target } from "./callers.js";
import { serveJobs } from "./ipc.js";
import { percentile } from "./stats.js";
import { checkOutputs, workloadOf } from "./workload.js";

export type LoadJob =
  | { type: "check"; target: Target }
  | { type: "latency"; target: Target; warmup: number; samples: number }
  | { type: "throughput"; target: Target; concurrency: number; warmupMs: number; durationMs: number };

/** Latency of sequential calls, in microseconds. */
export interface LatencyResult {
  p50: number;
  p99: number;
  mean: number;
}

export interface ThroughputResult {
  rps: number;
  errors: number;
  /** Completions over the whole job, warm-up included, and this process's CPU time meanwhile (µs). */
  total: number;
  cpuUs: number;
}

const callers = new Map<string, Promise<Caller>>();

function callerFor(target: Target, concurrency = 1): Promise<Caller> {
  const key = `${JSON.stringify(target)}/${concurrency}`;
  let caller = callers.get(key);
  if (!caller) {
    caller = createCaller(target, concurrency);
    callers.set(key, caller);
  }
  return caller;
}

async function latency(caller: Caller, warmup: number, samples: number): Promise<LatencyResult> {
  for (let i = 0; i < warmup; i++) await caller.infer();
  const times = new Array<number>(samples);
  for (let i = 0; i < samples; i++) {
    const start = performance.now();
    await caller.infer();
    times[i] = (performance.now() - start) * 1000;
  }
  const mean = times.reduce((a, b) => a + b, 0) / samples;
  return { p50: percentile(times, 50), p99: percentile(times, 99), mean };
}

/** Closed loop: `concurrency` callers back to back; completions inside the window count. */
async function throughput(caller: Caller, concurrency: number, warmupMs: number, durationMs: number) {
  const begin = performance.now() + warmupMs;
  const end = begin + durationMs;
  let completed = 0;
  let total = 0;
  let errors = 0;
  const cpu = process.cpuUsage();
  const loop = async () => {
    while (performance.now() < end) {
      try {
        await caller.infer();
        total++;
        const t = performance.now();
        if (t >= begin && t <= end) completed++;
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const { user, system } = process.cpuUsage(cpu);
  return { rps: completed / (durationMs / 1000), errors, total, cpuUs: user + system } satisfies ThroughputResult;
}

serveJobs(
  null,
  async (job: LoadJob) => {
    switch (job.type) {
      case "check": {
        // One call, compared here with the workload's expected values (no big arrays over IPC).
        const outputs = await (await callerFor(job.target)).infer();
        return checkOutputs(workloadOf(job.target.workload), outputs);
      }
      case "latency":
        return latency(await callerFor(job.target), job.warmup, job.samples);
      case "throughput":
        return throughput(await callerFor(job.target, job.concurrency), job.concurrency, job.warmupMs, job.durationMs);
    }
  },
  async () => {
    for (const caller of callers.values()) await (await caller).close();
  },
);
