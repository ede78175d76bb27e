// The Python backend's cost, in one process through `core.infer` (no network, so the stub
// boundary is what is measured): add/sub round-trip latency through Python against its JS twin
// and the ONNX `simple`, and the throughput of a 16 MiB identity through Python against the same
// through the JS backend. Models: examples/python_model_repository's add_sub, the JS add_sub and
// ONNX simple of examples/model_repository, and two identities written here.
//
//   npx tsx bench/python-backend.ts [--reps=5] [--samples=300] [--mib=16] [--python=python3]
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { InferenceRequest } from "@galley/server";
import { startInProcess } from "./lib/in-process.js";
import { formatSpread, median, percentile, spread, table } from "./lib/stats.js";

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ??
  process.env[`BENCH_${name.toUpperCase()}`] ??
  fallback;
const REPS = Number(arg("reps", "5"));
const SAMPLES = Number(arg("samples", "300"));
const MIB = Number(arg("mib", "16"));
const PYTHON = arg("python", "python3");

const examples = fileURLToPath(new URL("../examples/", import.meta.url));
const repo = mkdtempSync(join(tmpdir(), "galley-bench-python-"));
cpSync(join(examples, "python_model_repository", "add_sub"), join(repo, "add_sub_py"), { recursive: true });
cpSync(join(examples, "model_repository", "add_sub"), join(repo, "add_sub_js"), { recursive: true });
cpSync(join(examples, "model_repository", "simple"), join(repo, "simple"), { recursive: true });
for (const [name, backend] of [
  ["add_sub_py", "python"],
  ["add_sub_js", "js"],
] as const) {
  const file = join(repo, name, "config.pbtxt");
  const text = (await import("node:fs")).readFileSync(file, "utf8");
  writeFileSync(
    file,
    text.replace('name: "add_sub"', `name: "${name}"`).replace(/backend: "\w+"/, `backend: "${backend}"`),
  );
}
const io = `input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]`;
for (const [name, backend, file, source] of [
  [
    "identity_py",
    "python",
    "model.py",
    `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
`,
  ],
  [
    "identity_js",
    "js",
    "model.mjs",
    `export default class { execute(requests) { return requests.map((r) => ({ outputs: [{ ...r.input("INPUT0"), name: "OUTPUT0" }] })); } }\n`,
  ],
] as const) {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "config.pbtxt"), `name: "${name}"\nbackend: "${backend}"\nmax_batch_size: 0\n${io}\n`);
  writeFileSync(join(repo, name, "1", file), source);
}

const server = await startInProcess(repo, { pythonExecutable: PYTHON });

function tensor(name: string, datatype: "FP32" | "INT32" | "UINT8", shape: number[], data: Uint8Array) {
  return { name, datatype, shape, data, parameters: {}, movable: true };
}

function addSub(model: string): InferenceRequest {
  const a = new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer);
  const b = new Uint8Array(new Float32Array([4, 3, 2, 1]).buffer);
  return {
    modelName: model,
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [tensor("INPUT0", "FP32", [4], a), tensor("INPUT1", "FP32", [4], b)],
    outputs: [],
  };
}

function simple(): InferenceRequest {
  const a = new Uint8Array(new Int32Array(16).fill(1).buffer);
  const b = new Uint8Array(new Int32Array(16).fill(2).buffer);
  return {
    modelName: "simple",
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [tensor("INPUT0", "INT32", [1, 16], a), tensor("INPUT1", "INT32", [1, 16], b)],
    outputs: [],
  };
}

const payload = new Uint8Array(MIB << 20);
for (let i = 0; i < payload.length; i += 4096) payload[i] = (i >> 12) & 0xff;

function identity(model: string): InferenceRequest {
  // A fresh buffer per call, as a binary HTTP body's tensor owns its bytes.
  return {
    modelName: model,
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [tensor("INPUT0", "UINT8", [payload.length], payload.slice())],
    outputs: [],
  };
}

/** p50 µs of `samples` sequential calls. */
async function latency(make: () => InferenceRequest, samples: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < samples; i++) {
    const request = make();
    const start = process.hrtime.bigint();
    const response = await server.core.infer(request);
    times.push(Number(process.hrtime.bigint() - start) / 1000);
    if (response.outputs.length === 0) throw new Error(`${request.modelName} returned no outputs`);
  }
  return percentile(times, 50);
}

/** GB/s of `calls` sequential identity calls (input bytes per second; the request's copy excluded). */
async function throughput(model: string, calls: number): Promise<number> {
  let busy = 0n;
  for (let i = 0; i < calls; i++) {
    const request = identity(model);
    const start = process.hrtime.bigint();
    const response = await server.core.infer(request);
    busy += process.hrtime.bigint() - start;
    const out = response.outputs[0]?.data;
    if (out?.byteLength !== payload.length || out[4096] !== payload[4096]) throw new Error(`${model}: wrong output`);
  }
  return (payload.length * calls) / Number(busy);
}

// Check and warm every path.
for (const m of ["add_sub_py", "add_sub_js"]) await latency(() => addSub(m), 20);
await latency(simple, 20);
await throughput("identity_py", 2);
await throughput("identity_js", 2);

// Whether the server maps the shared memory (large outputs lent, not copied) or goes through file
// descriptors (one copy each way): the identity's numbers mean different things.
const addon = "@galley/backends-native";
const mapping = await import(addon).then(
  (m: { sharedMemoryMapping?: () => { available: boolean } }) => m.sharedMemoryMapping?.().available === true,
  () => false,
);
console.log(
  `node ${process.version}, ${PYTHON}, load average ${loadavg()[0]?.toFixed(2)}; ${REPS} repetitions; ` +
    `shared memory ${mapping ? "mapped (the addon)" : "through file descriptors (no addon)"}`,
);
const py: number[] = [];
const js: number[] = [];
const onnx: number[] = [];
const pyRate: number[] = [];
const jsRate: number[] = [];
const ratios: number[] = [];
for (let rep = 0; rep < REPS; rep++) {
  const p = await latency(() => addSub("add_sub_py"), SAMPLES);
  const j = await latency(() => addSub("add_sub_js"), SAMPLES);
  py.push(p);
  js.push(j);
  onnx.push(await latency(simple, SAMPLES));
  ratios.push(p / j);
  pyRate.push(await throughput("identity_py", 10));
  jsRate.push(await throughput("identity_js", 10));
}
console.log(
  table(
    ["add/sub round trip", "p50 µs", "vs JS twin"],
    [
      ["Python add_sub", formatSpread(spread(py)), `${median(ratios).toFixed(2)}×`],
      ["JS add_sub", formatSpread(spread(js)), "1.00×"],
      ["ONNX simple", formatSpread(spread(onnx)), `${(median(onnx) / median(js)).toFixed(2)}×`],
    ],
  ),
);
console.log(
  table(
    [`${MIB} MiB identity`, "GB/s", "vs JS"],
    [
      ["Python", formatSpread(spread(pyRate), 2), `${(median(pyRate) / median(jsRate)).toFixed(2)}×`],
      ["JS", formatSpread(spread(jsRate), 2), "1.00×"],
    ],
  ),
);
const latencyOk = median(ratios) <= 2;
const rateOk = median(pyRate) >= 1;
console.log(
  `targets: Python add/sub p50 ≤ 2× the JS twin: ${latencyOk ? "met" : "MISSED"} (${median(ratios).toFixed(2)}×); ` +
    `${MIB} MiB identity ≥ 1 GB/s: ${rateOk ? "met" : "MISSED"} (${median(pyRate).toFixed(2)} GB/s)`,
);
await server.close();
rmSync(repo, { recursive: true, force: true });
