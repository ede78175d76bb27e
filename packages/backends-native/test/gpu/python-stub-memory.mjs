// What a Python-backend stub costs on the GPU (issue 50, item 3), on a GPU machine: a Galley
// server in a child process (explicit model control, nothing loaded at start), Python stubs under
// it, this process as the client. One model at a time is loaded, sent requests, measured and
// unloaded:
//   - py_nocuda (count 1, KIND_GPU, FORCE_CPU_ONLY_INPUT_TENSORS "no"): imports torch, computes on
//     the CPU, never sees a GPU tensor. Its stub should hold no CUDA context at all (0 MiB, absent
//     from nvidia-smi): the stub's start-up probe only loads libcuda.so.1 (galley_cuda.probe), no
//     driver call until the first GPU tensor.
//   - py_cuda_1, py_cuda_2, py_cuda_4 (instance_group count 1, 2, 4, KIND_GPU): torch on CUDA, a
//     weight made on the GPU in initialize, one small matmul there per request (cuBLAS).
//   - py_shared_1, py_shared_2, py_shared_4: the same model with SHARED_STUB_PROCESS "yes": the
//     instances in one stub process (one CUDA context), each with its own weight.
// For each: the GPU memory of every process (nvidia-smi --query-compute-apps, matched to
// /proc/<pid>/cmdline; stubs are named `triton_python_backend_stub <instance>`), MiB per stub, the
// stubs' total, the server's, the GPU's total used (and against the server alone), torch's own
// allocated / reserved bytes in each stub (the model returns them), after 2 × count concurrent
// requests × 10 rounds. First, what a context is made of, in bare Python processes (no server):
// cuInit alone (expected: no context), the primary context alone, torch's runtime with one tensor,
// and with a cuBLAS matmul.
// prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry; device-run.sh
// runs it as the step `stubmem`:
//
//   node packages/backends-native/build/gpu-carry/python-stub-memory.mjs --out=$OUT/python-stub-memory
//
// Options: --out=DIR (python-stub-memory.json, server.log), --python=python3, --gpu=0, --rounds=10,
// --device=cpu (a check of this script on a machine without CUDA: KIND_CPU, torch on the CPU, the
// same loads, requests, stub counts and unloads; no GPU figures).
// Prints one line per check, a table, and a summary; exits 1 if any check failed.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient } from "@galley/client";
import { forkServer, serveChecks } from "./check-server.mjs";
import { createChecks, finishChecks, gpuMemoryMiB, gpuProcesses } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const N = 256; // the matmul: [1, N] × [N, N]
// The stub's modules: two folders up from test/gpu/ and from build/gpu-carry/ (the bundle) alike.
const STUB_DIR = fileURLToPath(new URL("../../../server/python/", import.meta.url));

// What a context is made of, each in a bare Python process (no server): argv[1] is the stage.
//   cuinit: cuInit alone (what a stub's start-up probe used to call; expected: no context at all);
//   driver: the primary context alone (galley_cuda: cuInit, cuDevicePrimaryCtxRetain, as a stub
//           mapping its first GPU input makes it); torch-init: torch's runtime on the device and one
//           small tensor (its caching allocator's first segment); torch-matmul: and a matmul (cuBLAS).
// Prints "ready <pid>" and waits for stdin to close. argv[3] "cpu": no CUDA call (a check here).
const CONTEXT_PARTS = `
import os, sys
stage, gpu, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "cpu"
if stage in ("cuinit", "driver"):
    import galley_cuda
    if not cpu:
        drv = galley_cuda.driver()  # cuInit
        if stage == "driver":
            drv.use(gpu)  # cuDevicePrimaryCtxRetain + cuCtxSetCurrent
else:
    import torch
    if not cpu:
        x = torch.ones(${N}, ${N}, device="cuda:%d" % gpu)
        if stage == "torch-matmul":
            (x @ x).sum().item()
        torch.cuda.synchronize()
print("ready", os.getpid(), flush=True)
sys.stdin.read()
`;

// Never uses CUDA: torch imported, the input (a host tensor) doubled on the CPU.
const PY_NOCUDA = `
import os
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            x = torch.from_dlpack(t)
            y = (x * 2).numpy()
            mem = np.array([0, 0, os.getpid(), int(t.is_cpu())], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y), pb_utils.Tensor("MEM", mem)]))
        return responses
`;

// torch on CUDA: a weight on the instance's GPU from initialize, a matmul there per request.
const PY_CUDA = `
import os
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        gpu = "GPU" in args.get("model_instance_kind", "") and torch.cuda.is_available()
        self.device = torch.device("cuda:%s" % args["model_instance_device_id"]) if gpu else torch.device("cpu")
        self.weight = 2 * torch.eye(${N}, dtype=torch.float32, device=self.device)

    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            x = torch.from_dlpack(t).to(self.device)
            y = (x.reshape(1, -1) @ self.weight).reshape(-1).cpu().numpy()
            cuda = self.device.type == "cuda"
            allocated = torch.cuda.memory_allocated(self.device) if cuda else 0
            reserved = torch.cuda.memory_reserved(self.device) if cuda else 0
            mem = np.array([allocated, reserved, os.getpid(), int(t.is_cpu())], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y), pb_utils.Tensor("MEM", mem)]))
        return responses
`;

function writeModel(repo, name, source, count, { gpu, cpu, force, shared }) {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "1", "model.py"), source);
  const kind = cpu ? "KIND_CPU" : `KIND_GPU gpus: [ ${gpu} ]`;
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"\nbackend: "python"\nmax_batch_size: 0\n` +
      `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ ${N} ] } ]\n` +
      `output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ ${N} ] }, { name: "MEM" data_type: TYPE_INT64 dims: [ 4 ] } ]\n` +
      `instance_group [ { count: ${count} kind: ${kind} } ]\n` +
      (force ? `parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "${force}" } }\n` : "") +
      (shared ? `parameters { key: "SHARED_STUB_PROCESS" value: { string_value: "yes" } }\n` : ""),
  );
}

/** pid -> MiB of each process with a CUDA context (nvidia-smi); empty without nvidia-smi. */
/** GPU memory (MiB) of each process using a GPU, by pid. */
const gpuApps = () => new Map(gpuProcesses().map((p) => [p.pid, p.mib]));

/** GPU memory in use on `gpu` (MiB), null where there is none. */
function gpuUsedMiB(gpu) {
  const used = gpuMemoryMiB(gpu);
  return Number.isNaN(used) ? null : used;
}

/** The stub processes of `model` ({pid, instance}), from /proc: `triton_python_backend_stub <model>_<group>_<index>`. */
function stubsOf(model) {
  const pattern = new RegExp(`^${model}_\\d+_\\d+$`);
  const stubs = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let args;
    try {
      args = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    const at = args.indexOf("triton_python_backend_stub");
    if (at >= 0 && pattern.test(args[at + 1] ?? "")) stubs.push({ pid: Number(entry), instance: args[at + 1] });
  }
  return stubs.sort((a, b) => a.instance.localeCompare(b.instance));
}

async function until(what, ready, ms = 30_000) {
  const end = Date.now() + ms;
  while (!ready()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const MiB = (bytes) => Math.round((bytes / 2 ** 20) * 10) / 10;

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-stub-memory-")));
  const python = arg("python", "python3");
  const gpu = Number(arg("gpu", "0"));
  const cpu = arg("device", "cuda") === "cpu";
  const rounds = Number(arg("rounds", "10"));
  mkdirSync(out, { recursive: true });
  const { results, check, attempt } = createChecks();
  const figures = { configurations: [] };

  const repo = join(out, "models");
  const where = { gpu, cpu };
  writeModel(repo, "py_nocuda", PY_NOCUDA, 1, { ...where, force: "no" });
  const counts = [1, 2, 4];
  for (const count of counts) writeModel(repo, `py_cuda_${count}`, PY_CUDA, count, where);
  for (const count of counts) writeModel(repo, `py_shared_${count}`, PY_CUDA, count, { ...where, shared: true });

  const served = await forkServer(repo, python, { explicit: true });
  const { ports } = served;
  const server = served.child.pid;
  try {
    const grpc = createGrpcClient({ baseUrl: `http://127.0.0.1:${ports.grpc}` });
    const input = new Float32Array(N).map((_, i) => (i % 100) / 4);
    const bytes = new Uint8Array(input.buffer);

    const baseline = { serverMiB: gpuApps().get(server) ?? 0, gpuUsedMiB: gpuUsedMiB(gpu) };
    figures.baseline = baseline;
    console.log(`server alone (no model loaded): ${baseline.serverMiB} MiB; GPU used ${baseline.gpuUsedMiB} MiB`);

    // What a CUDA context costs before any stub: bare processes, one stage at a time.
    await attempt("context parts", async () => {
      const script = join(out, "context_parts.py");
      writeFileSync(script, CONTEXT_PARTS);
      const env = { ...process.env, PYTHONPATH: [STUB_DIR, process.env.PYTHONPATH].filter(Boolean).join(":") };
      figures.contextParts = {};
      for (const stage of ["cuinit", "driver", "torch-init", "torch-matmul"]) {
        const proc = spawn(python, [script, stage, String(gpu), cpu ? "cpu" : "cuda"], {
          stdio: ["pipe", "pipe", "pipe"],
          env,
        });
        const errors = [];
        proc.stderr.on("data", (d) => errors.push(d));
        const pid = await new Promise((resolve, reject) => {
          let text = "";
          proc.stdout.on("data", (d) => {
            text += d;
            const m = /ready (\d+)/.exec(text);
            if (m) resolve(Number(m[1]));
          });
          proc.once("exit", (code) => reject(new Error(`${stage} exited with ${code}: ${Buffer.concat(errors)}`)));
        });
        const apps = gpuApps();
        const mib = apps.get(pid) ?? 0;
        figures.contextParts[stage] = mib;
        proc.stdin.end();
        await new Promise((resolve) => proc.once("exit", resolve));
        if (stage === "cuinit")
          check(
            `context parts: cuInit alone makes no context${cpu ? " (CPU: ran)" : ""}`,
            !apps.has(pid),
            `${mib} MiB`,
          );
        else check(`context parts: ${stage} made a context${cpu ? " (CPU: ran)" : ""}`, cpu || mib > 0, `${mib} MiB`);
      }
      console.log(`a bare process's GPU memory (MiB): ${JSON.stringify(figures.contextParts)}`);
    });

    const measure = async (model, count, expectCuda, shared = false) => {
      const t0 = performance.now();
      await grpc.load(model);
      const loadMs = performance.now() - t0;
      const processes = shared ? 1 : count;
      check(
        `${model}: loaded, ${processes} stub process(es)`,
        stubsOf(model).length === processes,
        JSON.stringify(stubsOf(model)),
      );
      // 2 × count requests in flight, `rounds` times: every instance gets some.
      const torchBytes = new Map(); // pid -> [allocated, reserved] (of the instances in it together)
      let right = true;
      let hostInputs = true;
      for (let r = 0; r < rounds; r++) {
        const answers = await Promise.all(
          Array.from({ length: 2 * count }, () =>
            grpc.infer(model, { inputs: { INPUT0: { datatype: "FP32", shape: [N], data: bytes } } }),
          ),
        );
        for (const a of answers) {
          const y = new Float32Array(new Uint8Array(a.output("OUTPUT0").data).slice().buffer);
          right &&= y.every((v, i) => v === input[i] * 2);
          const mem = new BigInt64Array(new Uint8Array(a.output("MEM").data).slice().buffer);
          torchBytes.set(Number(mem[2]), [Number(mem[0]), Number(mem[1])]);
          hostInputs &&= mem[3] === 1n;
        }
      }
      check(`${model}: outputs = 2 × input`, right);
      check(`${model}: inputs reached model.py as host tensors`, hostInputs);
      const stubs = stubsOf(model);
      const apps = gpuApps();
      const perStub = stubs.map((s) => ({
        instance: s.instance,
        pid: s.pid,
        mib: apps.get(s.pid) ?? 0,
        hasContext: apps.has(s.pid),
        torchAllocatedMiB: MiB(torchBytes.get(s.pid)?.[0] ?? 0),
        torchReservedMiB: MiB(torchBytes.get(s.pid)?.[1] ?? 0),
        served: torchBytes.has(s.pid),
      }));
      const stubsMiB = perStub.reduce((sum, s) => sum + s.mib, 0);
      const used = gpuUsedMiB(gpu);
      const figure = {
        model,
        count,
        shared,
        loadMs: Math.round(loadMs),
        stubs: perStub,
        perStubMiB: perStub.length ? Math.round(stubsMiB / perStub.length) : 0,
        stubsMiB,
        serverMiB: apps.get(server) ?? 0,
        gpuUsedMiB: used,
        overServerAloneMiB: used !== null && baseline.gpuUsedMiB !== null ? used - baseline.gpuUsedMiB : null,
        stubsServed: perStub.filter((s) => s.served).length,
      };
      figures.configurations.push(figure);
      if (!cpu) {
        if (shared)
          check(
            `${model}: the ${count} instances share one stub process and one CUDA context`,
            perStub.length === 1 && perStub[0].hasContext,
            JSON.stringify(perStub),
          );
        else if (expectCuda)
          check(
            `${model}: each of the ${count} stubs has its own CUDA context (one process each, as Triton)`,
            perStub.every((s) => s.hasContext),
            JSON.stringify(perStub),
          );
        else
          check(
            `${model}: a stub that never sees a GPU tensor holds no CUDA context (0 MiB)`,
            perStub.every((s) => !s.hasContext),
            JSON.stringify(perStub),
          );
      }
      console.log(
        `${model} (count ${count}): stubs ${perStub.map((s) => `${s.mib}`).join(" + ") || "none"} = ${stubsMiB} MiB ` +
          `(${figure.perStubMiB} MiB per stub; torch reserved ${perStub.map((s) => s.torchReservedMiB).join(", ")} MiB), ` +
          `server ${figure.serverMiB} MiB, GPU used ${used ?? "n/a"} MiB (${figure.overServerAloneMiB ?? "n/a"} over the server alone); ` +
          `loaded in ${figure.loadMs} ms, ${figure.stubsServed}/${processes} stubs served`,
      );
      const pids = stubs.map((s) => s.pid);
      await grpc.unload(model);
      await until(`${model}'s stubs to exit`, () => stubsOf(model).length === 0);
      if (!cpu) await until(`${model}'s contexts to go`, () => !pids.some((pid) => gpuApps().has(pid)));
      check(`${model}: unloaded, its stubs gone`, stubsOf(model).length === 0);
    };

    await attempt("py_nocuda", () => measure("py_nocuda", 1, false));
    for (const count of counts) await attempt(`py_cuda_${count}`, () => measure(`py_cuda_${count}`, count, true));
    for (const count of counts)
      await attempt(`py_shared_${count}`, () => measure(`py_shared_${count}`, count, true, true));

    const of = (prefix) => figures.configurations.filter((c) => c.model.startsWith(prefix));
    const cuda = of("py_cuda_");
    const shared = of("py_shared_");
    if (cuda.length === counts.length) {
      figures.summary = cuda.map((c) => {
        const one = shared.find((s) => s.count === c.count);
        return {
          count: c.count,
          perStubMiB: c.perStubMiB,
          stubsMiB: c.stubsMiB,
          overServerAloneMiB: c.overServerAloneMiB,
          sharedStubMiB: one?.stubsMiB ?? null,
          sharedOverServerAloneMiB: one?.overServerAloneMiB ?? null,
        };
      });
      console.log(
        "count | MiB per stub | stubs total | GPU used over the server alone | one shared stub (SHARED_STUB_PROCESS) | GPU used over the server alone, shared",
      );
      for (const s of figures.summary)
        console.log(
          `${s.count} | ${s.perStubMiB} | ${s.stubsMiB} | ${s.overServerAloneMiB ?? "n/a"} | ${s.sharedStubMiB ?? "n/a"} | ${s.sharedOverServerAloneMiB ?? "n/a"}`,
        );
    }
  } finally {
    await served.stop(join(out, "server.log"));
  }
  finishChecks(out, "python-stub-memory", results, figures);
}

if (process.argv[2] === "--serve") await serveChecks(process.argv.slice(3));
else await main();
