// What one BLS call costs: a model calling another model from inside its `execute`, as a
// pipeline's loop does for every step (examples/text-to-video's denoising loop makes 20 a video).
// In one process through `core.infer`, sequential calls to an ONNX identity of 16 floats (ONNX
// Runtime runs it inline on the server's thread, so the call is almost all hop):
//   direct       `core.infer` from the server's thread: the call without a hop;
//   ping-pong    a bare `postMessage` echo between the server's thread and a worker, no Galley:
//                the floor of any call from a worker (two thread wake-ups);
//   BLS JS       `context.infer` from a scripted model (its worker) and back, timed there;
//   BLS Python   `pb_utils.InferenceRequest(...).exec()` from a Python model (its stub process)
//                and back, timed there.
// Printed: p50 and p90 µs per call, median [min–max] over the repetitions, and what each BLS
// route adds over the direct call, against the ping-pong's cost measured in the same run.
//
//   npx tsx bench/bls.ts [--reps=5] [--samples=2000] [--python=python3]
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import type { InferenceRequest } from "@galley/server";
import { IDENTITY, writeIdentityRepository } from "./lib/identity.js";
import { startInProcess } from "./lib/in-process.js";
import { formatSpread, median, percentile, spread, table } from "./lib/stats.js";

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ??
  process.env[`BENCH_${name.toUpperCase()}`] ??
  fallback;
/** A whole number from 1 to `max`, or a clear error. */
const count = (name: string, fallback: string, max: number) => {
  const value = Number(arg(name, fallback));
  if (!Number.isInteger(value) || value < 1 || value > max) {
    console.error(`--${name} must be a whole number from 1 to ${max}`);
    process.exit(2);
  }
  return value;
};
const REPS = count("reps", "5", 100);
const SAMPLES = count("samples", "2000", 1_000_000);
const PYTHON = arg("python", "python3");
const ELEMENTS = 16;

// The callee, `identity_fp32` (bench/lib/identity.ts), and the two callers beside it.
const identity = await writeIdentityRepository();
const repo = identity.dir;
const write = (path: string, text: string) => {
  mkdirSync(join(repo, path, ".."), { recursive: true });
  writeFileSync(join(repo, path), text);
};
// The callers: CALLS (INT32 [1]) calls in a row, each call's µs in MICROS (FP64 [CALLS]).
const caller = (name: string, backend: string) => `name: "${name}"
backend: "${backend}"
max_batch_size: 0
input [ { name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MICROS" data_type: TYPE_FP64 dims: [ -1 ] } ]
`;
write("bls_js/config.pbtxt", caller("bls_js", "js"));
write(
  "bls_js/1/model.mjs",
  `export default class {
  async execute(requests, context) {
    const responses = [];
    for (const request of requests) {
      const calls = request.input("CALLS").typed()[0];
      const micros = new Float64Array(calls);
      for (let i = 0; i < calls; i++) {
        const input = { name: "INPUT0", datatype: "FP32", shape: [${ELEMENTS}], data: new Float32Array(${ELEMENTS}).fill(i) };
        const start = performance.now();
        const reply = await context.infer({ model: "${IDENTITY}", inputs: [input] });
        micros[i] = (performance.now() - start) * 1000;
        if (reply.output("OUTPUT0")?.typed()[0] !== i) throw new Error("identity answered wrongly");
      }
      responses.push({ outputs: [{ name: "MICROS", datatype: "FP64", shape: [calls], data: micros }] });
    }
    return responses;
  }
}
`,
);
write("bls_py/config.pbtxt", caller("bls_py", "python"));
write(
  "bls_py/1/model.py",
  `import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            calls = int(pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()[0])
            micros = np.zeros(calls, dtype=np.float64)
            for i in range(calls):
                data = np.full(${ELEMENTS}, i, dtype=np.float32)
                start = time.perf_counter_ns()
                reply = pb_utils.InferenceRequest(
                    model_name="${IDENTITY}",
                    requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", data)],
                ).exec()
                micros[i] = (time.perf_counter_ns() - start) / 1000
                if reply.has_error():
                    raise pb_utils.TritonModelException(reply.error().message())
                if pb_utils.get_output_tensor_by_name(reply, "OUTPUT0").as_numpy()[0] != i:
                    raise pb_utils.TritonModelException("identity answered wrongly")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("MICROS", micros)]))
        return responses
`,
);

const server = await startInProcess(repo, { pythonExecutable: PYTHON });

const bytes = (data: ArrayBufferView) => new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
const request = (modelName: string, name: string, datatype: "FP32" | "INT32", data: ArrayBufferView) =>
  ({
    modelName,
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [{ name, datatype, shape: [data.byteLength / 4], data: bytes(data), parameters: {}, movable: true }],
    outputs: [],
  }) satisfies InferenceRequest;

/** µs of each of `samples` direct calls. */
async function direct(samples: number): Promise<number[]> {
  const micros: number[] = [];
  for (let i = 0; i < samples; i++) {
    const call = request(IDENTITY, "INPUT0", "FP32", new Float32Array(ELEMENTS).fill(i));
    const start = performance.now();
    const reply = await server.core.infer(call);
    micros.push((performance.now() - start) * 1000);
    const out = reply.outputs[0]?.data;
    if (!out || new Float32Array(out.slice().buffer)[0] !== i) throw new Error("identity answered wrongly");
  }
  return micros;
}

/** µs of each of `samples` calls a BLS model made, as it timed them. */
async function bls(caller: string, samples: number): Promise<number[]> {
  const reply = await server.core.infer(request(caller, "CALLS", "INT32", new Int32Array([samples])));
  const out = reply.outputs[0]?.data;
  if (!out || out.byteLength !== samples * 8) throw new Error(`${caller} returned no timings`);
  return Array.from(new Float64Array(out.slice().buffer));
}

// A worker that echoes every message back, as the floor of a call from a worker.
const echo = new Worker(
  `const { parentPort } = require("node:worker_threads"); parentPort.on("message", (m) => parentPort.postMessage(m));`,
  { eval: true },
);
async function pingPong(samples: number): Promise<number[]> {
  const micros: number[] = [];
  for (let i = 0; i < samples; i++) {
    const message = { model: IDENTITY, data: new Float32Array(ELEMENTS).fill(i) };
    const start = performance.now();
    await new Promise<void>((resolve) => {
      echo.once("message", () => resolve());
      echo.postMessage(message, [message.data.buffer]);
    });
    micros.push((performance.now() - start) * 1000);
  }
  return micros;
}

const routes: [string, (samples: number) => Promise<number[]>][] = [
  ["direct (`core.infer`)", direct],
  ["ping-pong (bare `postMessage`)", pingPong],
  ["BLS from JS (`context.infer`)", (n) => bls("bls_js", n)],
  ["BLS from Python (`exec()`)", (n) => bls("bls_py", n)],
];
for (const [, measure] of routes) await measure(200);

console.log(
  `node ${process.version}, ${PYTHON}, load average ${loadavg()[0]?.toFixed(2)}; ${REPS} repetitions of ${SAMPLES} sequential calls, FP32 [${ELEMENTS}]`,
);
const p50 = routes.map(() => [] as number[]);
const p90 = routes.map(() => [] as number[]);
for (let rep = 0; rep < REPS; rep++)
  for (const [i, [, measure]] of routes.entries()) {
    const micros = await measure(SAMPLES);
    p50[i]?.push(percentile(micros, 50));
    p90[i]?.push(percentile(micros, 90));
  }
const directP50 = median(p50[0] ?? []);
const pingPongP50 = median(p50[1] ?? []);
console.log(
  table(
    ["route", "p50 µs", "p90 µs", "p50 over direct", "over direct ÷ ping-pong"],
    routes.map(([name], i) => {
      const over = median(p50[i] ?? []) - directP50;
      return [
        name,
        formatSpread(spread(p50[i] ?? [])),
        formatSpread(spread(p90[i] ?? [])),
        i < 2 ? "" : over.toFixed(1),
        i < 2 ? "" : `${(over / pingPongP50).toFixed(2)}×`,
      ];
    }),
  ),
);

await echo.terminate();
await server.close();
await identity.remove();
