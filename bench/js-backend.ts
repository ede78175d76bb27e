// The scripted-model (js) backend's cost: an identity round trip through a JS model against an
// ONNX Identity, in one process through `core.infer` (no transport, so the worker boundary is
// what is measured), at 64 B, 1 MiB and 64 MiB. A tensor that crossed the boundary by copying
// would cost at least one copy (a fresh buffer of its size, filled) each way; the table prints that
// copy, measured in the same run, and checks that the input's buffer was moved (detached here) rather than copied.
//
//   npx tsx bench/js-backend.ts [--reps=5] [--samples=200]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import type { InferenceRequest } from "@galley/server";
import { identityOnnx } from "./lib/identity.js";
import { startInProcess } from "./lib/in-process.js";
import { formatSpread, median, percentile, spread, table } from "./lib/stats.js";

const arg = (name: string, fallback: number) => {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`));
  return Number(flag?.split("=")[1] ?? process.env[`BENCH_${name.toUpperCase()}`] ?? fallback);
};
const REPS = arg("reps", 5);
const SAMPLES = arg("samples", 200);
const SIZES: [string, number][] = [
  ["64 B", 64],
  ["1 MiB", 1 << 20],
  ["64 MiB", 64 << 20],
];

const repo = mkdtempSync(join(tmpdir(), "galley-bench-js-"));
const io = `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]`;
mkdirSync(join(repo, "identity_js", "1"), { recursive: true });
writeFileSync(
  join(repo, "identity_js", "config.pbtxt"),
  `name: "identity_js"\nbackend: "js"\nmax_batch_size: 0\n${io}\n`,
);
writeFileSync(
  join(repo, "identity_js", "1", "model.mjs"),
  `export default class { execute(requests) { return requests.map((r) => ({ outputs: [{ ...r.input("INPUT0"), name: "OUTPUT0" }] })); } }\n`,
);
mkdirSync(join(repo, "identity_onnx", "1"), { recursive: true });
writeFileSync(
  join(repo, "identity_onnx", "config.pbtxt"),
  `name: "identity_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n${io}\n`,
);
writeFileSync(join(repo, "identity_onnx", "1", "model.onnx"), identityOnnx());

const server = await startInProcess(repo);

/** A request whose input owns its buffer, as a binary HTTP body's tensors do. */
function request(modelName: string, bytes: number): { request: InferenceRequest; buffer: ArrayBuffer } {
  const buffer = new ArrayBuffer(bytes);
  new Float32Array(buffer).fill(1.5);
  return {
    buffer,
    request: {
      modelName,
      modelVersion: "",
      id: "",
      parameters: {},
      inputs: [
        {
          name: "INPUT0",
          datatype: "FP32",
          shape: [bytes / 4],
          data: new Uint8Array(buffer),
          parameters: {},
          movable: true,
        },
      ],
      outputs: [],
    },
  };
}

/** µs per call (p50 over `samples`) and whether the inputs were moved (detached) every time. */
async function measure(modelName: string, bytes: number, samples: number): Promise<{ p50: number; moved: boolean }> {
  const times: number[] = [];
  let moved = true;
  for (let i = 0; i < samples; i++) {
    const { request: r, buffer } = request(modelName, bytes);
    const start = process.hrtime.bigint();
    const response = await server.core.infer(r);
    times.push(Number(process.hrtime.bigint() - start) / 1000);
    moved &&= buffer.byteLength === 0;
    const out = response.outputs[0]?.data;
    if (out?.byteLength !== bytes || new Float32Array(out.buffer, out.byteOffset, 1)[0] !== 1.5) {
      throw new Error(`${modelName} returned a wrong output`);
    }
  }
  return { p50: percentile(times, 50), moved };
}

function memcpyMicros(bytes: number, samples: number): number {
  const from = new Uint8Array(bytes).fill(7);
  const times: number[] = [];
  for (let i = 0; i < samples; i++) {
    const start = process.hrtime.bigint();
    from.slice();
    times.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  return percentile(times, 50);
}

console.log(`node ${process.version}, load average ${loadavg()[0]?.toFixed(2)}; ${REPS} repetitions`);
const rows: string[][] = [];
const jsMedians: number[] = [];
const copyMedians: number[] = [];
for (const [label, bytes] of SIZES) {
  const samples = bytes >= 64 << 20 ? Math.max(10, Math.floor(SAMPLES / 20)) : SAMPLES;
  for (const m of ["identity_js", "identity_onnx"]) await measure(m, bytes, Math.min(5, samples));
  const js: number[] = [];
  const onnx: number[] = [];
  const copy: number[] = [];
  let moved = true;
  for (let rep = 0; rep < REPS; rep++) {
    const a = await measure("identity_js", bytes, samples);
    const b = await measure("identity_onnx", bytes, samples);
    js.push(a.p50);
    onnx.push(b.p50);
    moved &&= a.moved;
    copy.push(memcpyMicros(bytes, samples));
  }
  jsMedians.push(median(js));
  copyMedians.push(median(copy));
  rows.push([
    label,
    formatSpread(spread(js)),
    formatSpread(spread(onnx)),
    (median(js) / median(onnx)).toFixed(2),
    formatSpread(spread(copy)),
    (median(js) / median(copy)).toFixed(2),
    moved ? "yes" : "NO",
  ]);
}
console.log(
  table(
    ["tensor", "JS identity p50 µs", "ONNX identity p50 µs", "JS / ONNX", "one copy µs", "JS / copy", "input moved"],
    rows,
  ),
);
// The round trip has a fixed cost (the 64 B row); what a size adds over it is what a copy would add to.
for (let i = 1; i < SIZES.length; i++) {
  const added = (jsMedians[i] ?? 0) - (jsMedians[0] ?? 0);
  console.log(
    `${SIZES[i]?.[0]}: the JS round trip adds ${added.toFixed(1)} µs over 64 B; one copy of that size costs ${(copyMedians[i] ?? 0).toFixed(1)} µs`,
  );
}
console.log(
  "\nA copy each way would cost at least 2 copies: an added cost under one copy (and 'JS / copy' far under 2 at 64 MiB) means the tensors crossed the worker boundary without being copied; 'input moved' says the request's buffer was detached (transferred) every time.",
);
await server.close();
rmSync(repo, { recursive: true, force: true });
