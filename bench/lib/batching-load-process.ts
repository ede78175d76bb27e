// Child entry: the batching benchmark's load generator (argv[2]: the MLP's ONNX file, argv[3]: the
// intra-op thread count of its session). It also hosts
// the in-process baseline, onnxruntime-node's session.run with Galley's session settings for the
// MLP, so served and in-process numbers come from the same process and the same client code.
import type { Agent } from "node:http";
import { performance } from "node:perf_hooks";
import ort from "onnxruntime-node";
import { binaryRequest, bytesOf, float32s, inferBinary, keepAlive } from "./binary-http.js";
import { serveJobs } from "./ipc.js";
import { INTRA_OP_THREADS, MLP_IN, MLP_OUT, mlpInput } from "./mlp.js";
import { EXPECTED_DIFFERENCE, EXPECTED_SUM, INPUT0, INPUT1, int32s, SHAPE, TENSOR_BYTES } from "./simple.js";

export type BatchingJob =
  | { type: "check-mlp"; port: number; model: string; batch: number }
  | { type: "check-ensemble"; port: number }
  | { type: "closed-loop"; call: CallSpec; concurrency: number; warmupMs: number; durationMs: number }
  | { type: "sequential"; call: CallSpec; warmupMs: number; durationMs: number; minSamples: number };

/** What one call is: the MLP served or in-process at a batch size, or one ensemble_add_sub result. */
export type CallSpec =
  | { kind: "mlp-served"; port: number; model: string; batch: number }
  | { kind: "mlp-ort"; batch: number }
  | { kind: "ensemble"; port: number }
  | { kind: "six-calls"; port: number };

/**
 * Latencies in microseconds; `perSecond` counts calls (closed loop) or rows (sequential). `cpuUs` and
 * `wallMs` cover the whole job, warm-up included: the load process's CPU time and the elapsed time.
 */
export interface LoadResult {
  perSecond: number;
  p50: number;
  p99: number;
  mean: number;
  samples: number;
  errors: number;
  cpuUs: number;
  wallMs: number;
}

const modelFile = process.argv[2];
if (!modelFile) throw new Error("usage: batching-load-process <model.onnx> [intra-op threads]");
const intraOpNumThreads = Number(process.argv[3] ?? INTRA_OP_THREADS);

/** Galley's settings for the MLP: the same intra_op_thread_count and, as Galley defaults to, no spin-waiting. */
let session: Promise<ort.InferenceSession> | undefined;
const ortSession = () => {
  session ??= ort.InferenceSession.create(modelFile, {
    intraOpNumThreads,
    extra: { session: { intra_op: { allow_spinning: "0" } } },
  });
  return session;
};

type Call = () => Promise<unknown>;

function mlpServed(agent: Agent, port: number, model: string, batch: number): () => Promise<Float32Array> {
  const req = binaryRequest(
    model,
    [{ name: "INPUT", datatype: "FP32", shape: [batch, MLP_IN] }],
    ["OUTPUT"],
    [batch * MLP_IN * 4],
  );
  const blob = bytesOf(mlpInput(batch));
  return async () => {
    const { OUTPUT } = await inferBinary(agent, port, req, [blob]);
    if (!OUTPUT || OUTPUT.byteLength !== batch * MLP_OUT * 4) throw new Error(`OUTPUT of ${OUTPUT?.byteLength} bytes`);
    return float32s(OUTPUT);
  };
}

async function mlpOrt(batch: number): Promise<() => Promise<Float32Array>> {
  const s = await ortSession();
  const input = mlpInput(batch);
  return async () => {
    const results = await s.run({ INPUT: new ort.Tensor("float32", input, [batch, MLP_IN]) });
    return results.OUTPUT?.data as Float32Array;
  };
}

const simpleInputs = [
  { name: "INPUT0", datatype: "INT32", shape: SHAPE },
  { name: "INPUT1", datatype: "INT32", shape: SHAPE },
];
const in0 = bytesOf(INPUT0);
const in1 = bytesOf(INPUT1);

/** ensemble_add_sub: one request, six steps inside the server. */
function ensemble(agent: Agent, port: number): () => Promise<[Int32Array, Int32Array]> {
  const req = binaryRequest("ensemble_add_sub", simpleInputs, ["OUTPUT0", "OUTPUT1"], [TENSOR_BYTES, TENSOR_BYTES]);
  return async () => {
    const { OUTPUT0, OUTPUT1 } = await inferBinary(agent, port, req, [in0, in1]);
    if (!OUTPUT0 || !OUTPUT1) throw new Error("ensemble reply without OUTPUT0/OUTPUT1");
    return [int32s(OUTPUT0), int32s(OUTPUT1)];
  };
}

/**
 * The same six `simple` calls made by the client, each asking only for the output the next step
 * needs. The ensemble's graph is two independent chains (steps 1→3→5 give OUTPUT0, 2→4→6 give
 * OUTPUT1), so the client runs both chains concurrently: as parallel as the graph allows.
 */
function sixCalls(agent: Agent, port: number): () => Promise<[Int32Array, Int32Array]> {
  const reqs = {
    OUTPUT0: binaryRequest("simple", simpleInputs, ["OUTPUT0"], [TENSOR_BYTES, TENSOR_BYTES]),
    OUTPUT1: binaryRequest("simple", simpleInputs, ["OUTPUT1"], [TENSOR_BYTES, TENSOR_BYTES]),
  };
  const step = async (a: Uint8Array, b: Uint8Array, output: "OUTPUT0" | "OUTPUT1") => {
    const bytes = (await inferBinary(agent, port, reqs[output], [a, b]))[output];
    if (!bytes) throw new Error(`simple reply without ${output}`);
    return bytes;
  };
  const chain0 = async () => {
    const doubleInput0 = await step(in0, in0, "OUTPUT0"); // step 1
    const input0Val = await step(doubleInput0, in0, "OUTPUT1"); // step 3
    return step(input0Val, in1, "OUTPUT0"); // step 5
  };
  const chain1 = async () => {
    const doubleInput1 = await step(in1, in1, "OUTPUT0"); // step 2
    const input1Val = await step(doubleInput1, in1, "OUTPUT1"); // step 4
    return step(in0, input1Val, "OUTPUT1"); // step 6
  };
  return async () => {
    const [sum, difference] = await Promise.all([chain0(), chain1()]);
    return [int32s(sum), int32s(difference)];
  };
}

/** A call for the spec, with the keep-alive agent it uses (`sockets` connections at most). */
async function callFor(spec: CallSpec, sockets: number): Promise<{ call: Call; close: () => void }> {
  if (spec.kind === "mlp-ort") return { call: await mlpOrt(spec.batch), close: () => {} };
  const agent = keepAlive(spec.kind === "six-calls" ? 2 * sockets : sockets);
  const close = () => agent.destroy();
  switch (spec.kind) {
    case "mlp-served":
      return { call: mlpServed(agent, spec.port, spec.model, spec.batch), close };
    case "ensemble":
      return { call: ensemble(agent, spec.port), close };
    case "six-calls":
      return { call: sixCalls(agent, spec.port), close };
  }
}

type Latencies = Omit<LoadResult, "cpuUs" | "wallMs">;

function summarise(times: number[], perSecond: number, errors: number): Latencies {
  const sorted = times.sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1];
  const mean = sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length);
  return { perSecond, p50: at(50) ?? Number.NaN, p99: at(99) ?? Number.NaN, mean, samples: sorted.length, errors };
}

/** Run `measure`, adding this process's CPU time and the wall time it took. */
async function timed(measure: () => Promise<Latencies>): Promise<LoadResult> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  const result = await measure();
  const { user, system } = process.cpuUsage(cpu);
  return { ...result, cpuUs: user + system, wallMs: performance.now() - start };
}

/** `concurrency` callers back to back; calls that complete inside the window count (and are timed). */
async function closedLoop(call: Call, concurrency: number, warmupMs: number, durationMs: number): Promise<Latencies> {
  const begin = performance.now() + warmupMs;
  const end = begin + durationMs;
  const times: number[] = [];
  let errors = 0;
  const loop = async () => {
    while (performance.now() < end) {
      const start = performance.now();
      try {
        await call();
        const t = performance.now();
        if (t >= begin && t <= end) times.push((t - start) * 1000);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  return summarise(times, times.length / (durationMs / 1000), errors);
}

/** Sequential calls: warm-up, then at least `durationMs` and `minSamples`; perSecond counts rows. */
async function sequential(call: Call, batch: number, warmupMs: number, durationMs: number, minSamples: number) {
  const warmEnd = performance.now() + warmupMs;
  while (performance.now() < warmEnd) await call();
  const times: number[] = [];
  const begin = performance.now();
  let now = begin;
  while (now - begin < durationMs || times.length < minSamples) {
    const start = now;
    await call();
    now = performance.now();
    times.push((now - start) * 1000);
  }
  return summarise(times, (batch * times.length) / ((now - begin) / 1000), 0);
}

const batchOf = (spec: CallSpec) => ("batch" in spec ? spec.batch : 1);

serveJobs(
  null,
  async (job: BatchingJob) => {
    switch (job.type) {
      case "check-mlp": {
        // Largest difference between Galley's OUTPUT and session.run's on the same rows.
        const agent = keepAlive(1);
        const served = await mlpServed(agent, job.port, job.model, job.batch)();
        agent.destroy();
        const local = await (await mlpOrt(job.batch))();
        return served.reduce((worst, v, i) => Math.max(worst, Math.abs(v - (local[i] as number))), 0);
      }
      case "check-ensemble": {
        const agent = keepAlive(2);
        const same = ([sum, difference]: [Int32Array, Int32Array]) =>
          sum.every((v, i) => v === EXPECTED_SUM[i]) && difference.every((v, i) => v === EXPECTED_DIFFERENCE[i]);
        const result = {
          ensemble: same(await ensemble(agent, job.port)()),
          sixCalls: same(await sixCalls(agent, job.port)()),
        };
        agent.destroy();
        return result;
      }
      case "closed-loop": {
        const { call, close } = await callFor(job.call, job.concurrency);
        try {
          return await timed(() => closedLoop(call, job.concurrency, job.warmupMs, job.durationMs));
        } finally {
          close();
        }
      }
      case "sequential": {
        const { call, close } = await callFor(job.call, 1);
        try {
          return await timed(() => sequential(call, batchOf(job.call), job.warmupMs, job.durationMs, job.minSamples));
        } finally {
          close();
        }
      }
    }
  },
  async () => {
    await (await session)?.release();
  },
);
