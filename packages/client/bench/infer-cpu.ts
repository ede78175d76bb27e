// Client CPU per gRPC `ModelInfer` call at concurrency 1: the lean path of `client.infer` against
// the Connect path it replaced (`client.service.modelInfer` + `grpcInferResult`, which is what
// `infer` did before), both against one real Galley server serving `simple` in another process.
// A third row is the floor: a minimal client on node:http2 alone that sends one pre-encoded message
// and decodes the reply (bench/lib/callers.ts `grpc-raw`), i.e. what any client on node:http2 pays.
// CPU is this process's `process.cpuUsage()` (user + system, all threads) over `--calls` calls,
// divided by the calls; repetitions interleave the two paths, so drift spreads over both.
//
//   npx tsx packages/client/bench/infer-cpu.ts [--calls=3000] [--reps=5] [--warmup=500]
import { createCaller } from "../../../bench/lib/callers.js";
import { startChild } from "../../../bench/lib/ipc.js";
import { option } from "../../../bench/lib/setup.js";
import { formatSpread, pairedRatios, spread, table } from "../../../bench/lib/stats.js";
import { createGrpcClient, grpcInferRequest, grpcInferResult, type InferOptions, tensor } from "../src/index.js";

const calls = option("calls", 3000);
const reps = option("reps", 5);
const warmup = option("warmup", 500);

const server = await startChild<{ grpc: number }>(new URL("../../../bench/lib/server-process.ts", import.meta.url), [
  "galley",
]);
const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${server.ready.grpc}` });
const request: InferOptions = {
  inputs: {
    INPUT0: tensor.int32(
      [1, 16],
      Int32Array.from({ length: 16 }, (_, i) => i),
    ),
    INPUT1: tensor.int32(
      [1, 16],
      Int32Array.from({ length: 16 }, () => 1),
    ),
  },
};
const floor = await createCaller({ kind: "grpc-raw", port: server.ready.grpc });
const paths: Record<string, () => Promise<unknown>> = {
  "Connect (before)": async () =>
    grpcInferResult(await client.service.modelInfer(grpcInferRequest("simple", request))).output("OUTPUT0"),
  "lean client.infer (after)": async () => (await client.infer("simple", request)).output("OUTPUT0"),
  "floor: bare node:http2, pre-encoded": () => floor.infer(),
};

const cpu: Record<string, number[]> = {};
const wall: Record<string, number[]> = {};
for (const [name, call] of Object.entries(paths)) {
  for (let i = 0; i < warmup; i++) await call();
  cpu[name] = [];
  wall[name] = [];
}
for (let rep = 0; rep < reps; rep++) {
  for (const [name, call] of Object.entries(paths)) {
    const started = performance.now();
    const before = process.cpuUsage();
    for (let i = 0; i < calls; i++) await call();
    const used = process.cpuUsage(before);
    wall[name]?.push(((performance.now() - started) * 1000) / calls);
    cpu[name]?.push((used.user + used.system) / calls);
  }
}
client.close();
await floor.close();
await server.stop();

const names = Object.keys(paths);
const [before, after] = names.map((n) => cpu[n] ?? []);
console.log(
  table(
    ["path", "client CPU µs/call", "wall µs/call"],
    names.map((n) => [n, formatSpread(spread(cpu[n] ?? [])), formatSpread(spread(wall[n] ?? []))]),
  ),
);
console.log(
  `\nafter/before client CPU: ${formatSpread(spread(pairedRatios(after ?? [], before ?? [])), 2)} (target ≤ 0.5); ${calls} calls × ${reps} reps`,
);
