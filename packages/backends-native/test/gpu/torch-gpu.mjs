// The torch addon on a GPU (issue 18): plain JavaScript over dist/, so it runs on a machine with
// Node and the built package but no node_modules. Run from packages/backends-native:
//
//   npm run test:gpu                  # = node test/gpu/torch-gpu.mjs
//   node test/gpu/torch-gpu.mjs --device=cpu --small     # the same checks on the CPU (here)
//
// Options: --device=cuda|cpu (cuda), --small (small models), --python=python3 (a Python with
// torch: it makes the models and the reference outputs on the same device), --out=DIR (where
// models and results go; a temporary folder by default). Prints one line per check and a
// summary; exits 1 if any check failed. Results also go to <out>/torch-gpu.json.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadTorchModel, torchSupport } from "../../dist/torch.js";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const device = arg("device", "cuda");
const small = process.argv.includes("--small");
const python = arg("python", "python3");
const out = arg("out", mkdtempSync(join(tmpdir(), "galley-torch-gpu-")));
const fixtures = fileURLToPath(new URL("../../../server/test/fixtures/pytorch/", import.meta.url));
const script = join(fixtures, "bench_models.py");

const results = [];
function check(name, ok, detail = "") {
  results.push({ name, ok, detail });
  console.log(`${ok ? "PASS" : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
}
async function attempt(name, body) {
  try {
    await body();
  } catch (error) {
    check(name, false, error.message.split("\n").slice(-3).join(" | "));
  }
}

function half(bits) {
  const s = bits & 0x8000 ? -1 : 1;
  const e = (bits >> 10) & 0x1f;
  const f = bits & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? Number.NaN : s * Number.POSITIVE_INFINITY;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}
function values(bytes, datatype) {
  const copy = bytes.slice().buffer;
  if (datatype === "FP16") return Array.from(new Uint16Array(copy), half);
  return Array.from(new Float32Array(copy));
}
// Bytes first (Buffer.equals is a memcmp): decoding 24M FP16 values into JS numbers takes seconds,
// so values are compared only when the bytes differ.
function compare(got, want, datatype) {
  const identical = Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(
    Buffer.from(want.buffer, want.byteOffset, want.byteLength),
  );
  if (identical) return { identical, maxDiff: 0, sameLength: true };
  const a = values(got, datatype);
  const b = values(want, datatype);
  let maxDiff = 0;
  for (let i = 0; i < Math.min(a.length, b.length); i++) maxDiff = Math.max(maxDiff, Math.abs(a[i] - b[i]));
  return { identical, maxDiff, sameLength: a.length === b.length };
}

const support = torchSupport();
check("addon loads", support.available, support.available ? `libtorch ${support.version}` : support.reason);
if (device === "cuda") {
  check(
    "CUDA usable by libtorch",
    support.cudaCompiled === true && (support.cudaDevices ?? 0) > 0,
    `cudaCompiled=${support.cudaCompiled} devices=${support.cudaDevices}`,
  );
}
const options = { device, deviceId: 0 };

await attempt("a TorchScript file saved by torch 1.13 loads and runs", async () => {
  const model = await loadTorchModel(join(fixtures, "add_sub.pt"), options);
  const f32 = (v) => new Uint8Array(Float32Array.from(v).buffer);
  const { outputs } = await model.execute([
    { datatype: "FP32", shape: [3], data: f32([1, 2, 3]) },
    { datatype: "FP32", shape: [3], data: f32([10, 20, 30]) },
  ]);
  await model.close();
  const sum = Array.from(new Float32Array(outputs[0].data.slice().buffer));
  check("a TorchScript file saved by torch 1.13 loads and runs", sum.join() === "11,22,33", `sum ${sum.join(",")}`);
});

const batches = [1, 8];
execFileSync(
  python,
  [script, "make", out, "--dtype", device === "cuda" ? "fp16" : "fp32", ...(small ? ["--small"] : [])],
  { stdio: "inherit" },
);
for (const b of batches)
  execFileSync(python, [script, "reference", out, "--device", device, "--batch", String(b)], { stdio: "inherit" });
const models = JSON.parse(readFileSync(join(out, "models.json"), "utf8"));

for (const [name, info] of Object.entries(models)) {
  await attempt(`${name}: outputs equal Python's`, async () => {
    const model = await loadTorchModel(join(out, `${name}.pt`), options);
    for (const b of batches) {
      const input = new Uint8Array(readFileSync(join(out, `${name}.b${b}.in`)));
      const want = new Uint8Array(readFileSync(join(out, `${name}.b${b}.out`)));
      const { outputs, inferNs } = await model.execute([
        { datatype: info.datatype, shape: [b, ...info.input], data: input },
      ]);
      const c = compare(outputs[0].data, want, info.datatype);
      const tolerance = info.datatype === "FP16" ? 1e-2 : 1e-4;
      check(
        `${name} batch ${b}: outputs equal Python's on ${device}`,
        c.sameLength && (c.identical || c.maxDiff <= tolerance),
        `${c.identical ? "byte-identical" : `max |diff| ${c.maxDiff}`}, shape [${outputs[0].shape}], ${(inferNs / 1e6).toFixed(3)} ms`,
      );
    }
    await model.close();
  });
}

await attempt("two instances on one device run concurrently", async () => {
  const info = models.espcn;
  const b = 8;
  const input = new Uint8Array(readFileSync(join(out, `espcn.b${b}.in`)));
  const want = new Uint8Array(readFileSync(join(out, `espcn.b${b}.out`)));
  const a = await loadTorchModel(join(out, "espcn.pt"), options);
  const c = await loadTorchModel(join(out, "espcn.pt"), options);
  // Outputs are kept and compared after the timed part, so the timing is the models' alone.
  const run = async (model, n, kept) => {
    for (let i = 0; i < n; i++) {
      const { outputs } = await model.execute([{ datatype: info.datatype, shape: [b, ...info.input], data: input }]);
      if (i < 3) kept.push(outputs[0].data);
    }
    return kept;
  };
  const same = (kept) =>
    kept.every((data) => {
      const cmp = compare(data, want, info.datatype);
      return cmp.identical || cmp.maxDiff <= (info.datatype === "FP16" ? 1e-2 : 1e-4);
    });
  const n = small ? 10 : 50;
  await run(a, 3, []);
  await run(c, 3, []);
  let start = performance.now();
  const serialKept = await run(a, n, []);
  await run(a, n, serialKept);
  const serial = performance.now() - start;
  start = performance.now();
  const [kept1, kept2] = await Promise.all([run(a, n, []), run(c, n, [])]);
  const parallel = performance.now() - start;
  const serialOk = same(serialKept);
  const ok1 = same(kept1);
  const ok2 = same(kept2);
  await a.close();
  await c.close();
  check(
    "two instances on one device run concurrently, each with correct outputs",
    serialOk && ok1 && ok2,
    `${2 * n} batches of ${b}: one instance ${serial.toFixed(1)} ms, two instances ${parallel.toFixed(1)} ms (speed-up ${(serial / parallel).toFixed(2)}x)`,
  );
});

await attempt("parameters: no inference mode, no optimized execution, cache cleaning, no cuDNN", async () => {
  const info = models.espcn;
  const input = new Uint8Array(readFileSync(join(out, "espcn.b1.in")));
  const want = new Uint8Array(readFileSync(join(out, "espcn.b1.out")));
  const model = await loadTorchModel(join(out, "espcn.pt"), {
    ...options,
    inferenceMode: false,
    optimizedExecution: false,
    cacheCleaning: true,
    cudnn: false,
  });
  const { outputs } = await model.execute([{ datatype: info.datatype, shape: [1, ...info.input], data: input }]);
  await model.close();
  const c = compare(outputs[0].data, want, info.datatype);
  check(
    "parameters: no inference mode, no optimized execution, cache cleaning, no cuDNN",
    c.maxDiff <= 5e-2,
    `max |diff| ${c.maxDiff}`,
  );
});

const failed = results.filter((r) => !r.ok);
writeFileSync(join(out, "torch-gpu.json"), JSON.stringify({ device, small, support, results }, null, 2));
console.log(
  `\n${results.length - failed.length} passed, ${failed.length} failed (${device}; details in ${join(out, "torch-gpu.json")})`,
);
process.exit(failed.length > 0 ? 1 : 0);
