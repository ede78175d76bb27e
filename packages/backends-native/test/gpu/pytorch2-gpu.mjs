// PyTorch-2 model.py on a GPU (issue 49 items 2 and 4): a `backend: "pytorch"`, `runtime:
// "model.py"` model on a KIND_GPU instance (its module in model.py, its weights in model.pt, FP16,
// torch.compile), served by Galley in a child process and called over gRPC; outputs against the
// same module run eagerly in Python on the same GPU, then the speed of the served model against
// eager and compiled Python in-process. prepare-carry.sh bundles this file (server and client
// inside) into build/gpu-carry; device-run.sh's `pt2` step runs it:
//
//   node packages/backends-native/build/gpu-carry/pytorch2-gpu.mjs --out=$OUT/pytorch2
//   npx tsx packages/backends-native/test/gpu/pytorch2-gpu.mjs --device=cpu --python=.test-python/bin/python3   # a check, here
//
// Options: --out=DIR, --python=python3 (torch 2.x), --device=cuda|cpu (cuda), --calls=50 (timed
// calls per batch size). Prints one line per check; exits 1 if any check failed.
import { execFile, fork } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createGrpcClient } from "@galley/client";
import { createChecks, values } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const BATCHES = [1, 8];
/** Relative L2 error allowed against eager FP16 (torch.compile fuses differently). */
const TOLERANCE = 1e-2;

const MODULE = `import torch
from torch import nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)
        self.half()

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
`;

const config = (name, kind, compile) => `name: "${name}"
backend: "pytorch"
runtime: "model.py"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP16, dims: [ 16, 64 ] } ]
output [ { name: "y", data_type: TYPE_FP16, dims: [ 16, 64 ] } ]
instance_group [ { kind: ${kind}, count: 1 } ]
${compile ? "" : 'parameters: { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" value: { string_value: "{\\"disable\\": true}" } }'}
`;

// Weights, inputs and the eager reference, then eager and compiled timings, in Python.
const REFERENCE = `
import json, sys, time, importlib.util, torch
repo, device, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = importlib.util.spec_from_file_location("m", repo + "/p2_eager/1/model.py")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0)
module = m.Small()
torch.save(module.state_dict(), repo + "/p2_eager/1/model.pt")
torch.save(module.state_dict(), repo + "/p2_compiled/1/model.pt")
module = module.to(device).eval()
compiled = torch.compile(module)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "ms": {}}
for b in ${JSON.stringify(BATCHES)}:
    g = torch.Generator().manual_seed(100 + b)
    x = torch.randn(b, 16, 64, generator=g).half()
    open(f"{repo}/in.b{b}", "wb").write(x.view(torch.int16).numpy().tobytes())
    with torch.inference_mode():
        y = module(x.to(device))
        open(f"{repo}/ref.b{b}", "wb").write(y.cpu().view(torch.int16).numpy().tobytes())
        xd = x.to(device)
        for label, fn in (("eager", module), ("compiled", compiled)):
            for _ in range(5):
                fn(xd)
            sync()
            t = time.perf_counter()
            for _ in range(calls):
                fn(xd)
            sync()
            out["ms"].setdefault(label, {})[b] = (time.perf_counter() - t) * 1000 / calls
print(json.dumps(out))
`;

function relL2(got, want) {
  const a = values(got, "FP16");
  const b = values(want, "FP16");
  if (a.length !== b.length) return Infinity;
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / (den || 1));
}

const run = (file, args, timeout) =>
  new Promise((resolve, reject) =>
    execFile(file, args, { timeout, maxBuffer: 64 << 20 }, (error, stdout, stderr) =>
      error ? reject(new Error(`${error.message} | ${stderr.slice(-2000)}`)) : resolve(stdout),
    ),
  );

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-pytorch2-")));
  const python = arg("python", "python3");
  const device = arg("device", "cuda");
  const calls = Number(arg("calls", "50"));
  const kind = device === "cuda" ? "KIND_GPU" : "KIND_CPU";
  const repo = join(out, "models");
  for (const [name, compile] of [
    ["p2_eager", false],
    ["p2_compiled", true],
  ]) {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(join(repo, name, "config.pbtxt"), config(name, kind, compile));
    writeFileSync(join(repo, name, "1", "model.py"), MODULE);
  }
  const { results, check, attempt } = createChecks();
  let reference = { ms: {} };
  await attempt("reference in Python", async () => {
    const script = join(out, "reference.py");
    writeFileSync(script, REFERENCE);
    reference = JSON.parse(
      (await run(python, [script, repo, device, String(calls)], 300_000)).trim().split("\n").pop(),
    );
    check("reference in Python", true, `torch ${reference.torch} on ${reference.device}`);
  });

  const served = {};
  const child = fork(process.argv[1], ["--serve", repo], {
    execArgv: process.execArgv,
    env: { ...process.env, PATH: `${join(python, "..")}:${process.env.PATH}` },
    stdio: ["ignore", "pipe", "pipe", "ipc"],
  });
  const logs = [];
  child.stdout.on("data", (d) => logs.push(d));
  child.stderr.on("data", (d) => logs.push(d));
  try {
    const ports = await new Promise((resolve, reject) => {
      child.once("message", resolve);
      child.once("exit", (code) => reject(new Error(`server exited ${code}`)));
    });
    check(
      "server loads both models on " + kind,
      ports.failed.length === 0,
      `failed: ${ports.failed.join(", ") || "none"}`,
    );
    const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${ports.grpc}` });
    for (const model of ["p2_eager", "p2_compiled"]) {
      for (const b of BATCHES) {
        await attempt(`${model} batch ${b}`, async () => {
          const input = {
            datatype: "FP16",
            shape: [b, 16, 64],
            data: new Uint8Array(readFileSync(join(repo, `in.b${b}`))),
          };
          const infer = () => client.infer(model, { inputs: { x: input }, timeoutMs: 600_000 });
          const first = await infer();
          const error = relL2(first.output("y").data, readFileSync(join(repo, `ref.b${b}`)));
          for (let i = 0; i < 5; i++) await infer();
          const times = [];
          for (let i = 0; i < calls; i++) {
            const t = performance.now();
            await infer();
            times.push(performance.now() - t);
          }
          times.sort((x, y) => x - y);
          const p50 = times[Math.floor(times.length / 2)];
          served[model] = { ...served[model], [b]: p50 };
          check(
            `${model} batch ${b}: output within ${TOLERANCE} (rel L2) of eager Python`,
            error <= TOLERANCE,
            `rel L2 ${error.toExponential(2)}; p50 ${p50.toFixed(3)} ms over ${calls} calls`,
          );
        });
      }
    }
    client.close();
  } finally {
    child.disconnect?.();
    await new Promise((resolve) => (child.exitCode === null ? child.once("exit", resolve) : resolve()));
    writeFileSync(join(out, "server.log"), Buffer.concat(logs));
  }
  console.log("\nms per call, batch 1 / 8 (Python in-process: device tensors; Galley: gRPC, host bytes in and out)");
  const row = (label, t) =>
    console.log(`${label.padEnd(32)} ${BATCHES.map((b) => (t?.[b] ?? Number.NaN).toFixed(3)).join(" / ")}`);
  row("Python eager", reference.ms.eager);
  row("Python torch.compile", reference.ms.compiled);
  row("Galley p2_eager (served)", served.p2_eager);
  row("Galley p2_compiled (served)", served.p2_compiled);
  const failed = results.filter((r) => !r.ok).length;
  writeFileSync(join(out, "pytorch2-gpu.json"), JSON.stringify({ device, reference, served, results }, null, 2));
  console.log(`\n${results.length - failed} passed, ${failed} failed (${device}; ${join(out, "pytorch2-gpu.json")})`);
  process.exitCode = failed ? 1 : 0;
}

if (process.argv[2] === "--serve") {
  // The server process: Galley over the repository in argv[3]; ports sent to the parent.
  const { createServer, createLogger } = await import("@galley/server");
  const server = createServer({
    modelRepositories: [process.argv[3]],
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ verboseLevel: 1 }),
  });
  const addresses = await server.listen();
  process.send?.({ grpc: addresses.grpc?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
} else {
  await main();
}
