// GPU tensors in the Python backend (issue 50) on a GPU machine: a Galley server in a child
// process (CUDA IPC handles do not open in the process that made them), Python stubs under it,
// this process as the client. Checks:
//   0. galley_cuda alone, between two Python processes: a torch CUDA tensor exported
//      (cuIpcGetMemHandle + offset) opens in the other (cuIpcOpenMemHandle in torch's primary
//      context) and `torch.from_dlpack` there sees the same bytes on the device; the deleter runs.
//   1. FORCE_CPU_ONLY_INPUT_TENSORS "no": a CUDA shared-memory input reaches model.py on the GPU
//      (`is_cpu()` false, `torch.from_dlpack(t)` a CUDA tensor), `* 2` there, returned with
//      `Tensor.from_dlpack`; outputs equal; the same model with "yes" gets a host tensor.
//   2. BLS on the device: model.py calls a TorchScript GPU model with `preferred_memory` GPU,
//      computes `* 3` on the result with torch, calls the model again with that tensor, and returns
//      the result: (x + 1) * 3 + 1; no host bytes but the client's output (host-transfer metrics).
//      That one copy is counted for the model whose memory it reads: model.py returns the second
//      call's output as its own without a copy (the BLS reply's IPC loan), so it is ts_plus_one's.
//   2b. A decoupled model sends three responses from a thread, each a tensor made on the GPU from
//      its GPU input: values, where they were, host bytes (one copy each, for gRPC).
//   2c. An output made on the GPU in model.py goes into the client's CUDA region device to device.
//   2d. An ensemble: CUDA region → libtorch (GPU) → model.py (KIND_CPU, FORCE_CPU_ONLY_INPUT_TENSORS
//      "no": it takes the tensor on the GPU anyway, as in Triton) → libtorch → CUDA region, with
//      no host byte anywhere.
//   2e. NVIDIA's own DLPack QA models from qa/python_models, unchanged (prepare-carry.sh stages
//      them from the server repository's mirror into build/gpu-carry/triton-qa; --triton-qa=DIR
//      names another copy), driven as their QA tests drive them: dlpack_identity (CUDA region in,
//      an output region too small: Triton's error), dlpack_add_sub (GPU and host inputs),
//      dlpack_io_identity ×3 in ensemble_io (every GPU/CPU placement of the three outputs),
//      dlpack_empty_output, variable_gpu_output (five requests in one batch), and dlpack_test (its
//      unittest suite inside execute; CuPy is not on the lent machine: a stand-in module makes
//      the tests that need CuPy or several GPUs skip, and the log says which ran).
//   3. GPU memory (nvidia-smi) before / after 1,000 requests of 1 and of 2 (flat within 64 MiB).
// prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry; device-run.sh
// runs it as the step `pygpu`:
//
//   node packages/backends-native/build/gpu-carry/python-gpu-tensors.mjs --out=$OUT/python-gpu-tensors
//
// Options: --out=DIR (python-gpu-tensors.json, logs), --python=python3, --gpu=0, --requests=1000,
// --triton-qa=DIR (qa/python_models of NVIDIA's server repository; default beside this bundle),
// --device=cpu (a check of this script on a machine without CUDA: CPU models, inputs as bytes, the
// same models and calls; what needs a GPU is left out).
// Prints one line per check and a summary; exits 1 if any check failed.
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CudaSharedMemory, createGrpcClient } from "@galley/client";
import { forkServer, serveChecks, transferDelta } from "./check-server.mjs";
import { createChecks, finishChecks, gpuMemoryMiB, gpuProcesses, values } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
// The stub's modules: two folders up from test/gpu/ and from build/gpu-carry/ (the bundle) alike.
const STUB_DIR = fileURLToPath(new URL("../../../server/python/", import.meta.url));
// NVIDIA's QA models, staged beside the bundle by prepare-carry.sh.
const TRITON_QA = fileURLToPath(new URL("./triton-qa/python_models/", import.meta.url));

// Stands in for CuPy (absent on the lent machine) under dlpack_test: a test that reaches for it skips.
const CUPY_STAND_IN = `import unittest


def __getattr__(name):
    raise unittest.SkipTest("CuPy is not installed on this machine")
`;

// 0. galley_cuda between two processes: the parent exports, the child (argv "open") maps.
const IPC_CHECK = String.raw`
import json, subprocess, sys
import torch
import galley_cuda

if len(sys.argv) > 1 and sys.argv[1] == "open":
    wire = json.loads(sys.stdin.readline())
    drv = galley_cuda.driver()
    mappings = galley_cuda.IpcMappings(drv)
    released = []
    t = galley_cuda.open_tensor(mappings, wire, "FP32", [wire["byteSize"] // 4], lambda: released.append(1))
    x = torch.from_dlpack(t)
    ok = x.is_cuda and x.data_ptr() == t.pointer
    total = float(x.sum().item())
    x.mul_(2)  # written in place: the parent sees it
    torch.cuda.synchronize()
    del x, t
    import gc; gc.collect()
    in_use = mappings.in_use()
    mappings.close_all()  # idle mappings stay for the next loan of the same allocation until then
    print(json.dumps({"ok": ok, "sum": total, "released": len(released), "mappings": in_use + len(mappings)}))
    sys.exit(0)

torch.cuda.init()
big = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
view = big[1000:1000 + 4096]  # not at the start of its allocation: the offset must carry it
wire = galley_cuda.export_tensor(view)
child = subprocess.run([sys.executable, __file__, "open"], input=json.dumps(wire) + "\n", capture_output=True, text=True)
if child.returncode != 0:
    print(json.dumps({"error": child.stderr[-2000:]}))
    sys.exit(1)
answer = json.loads(child.stdout.strip().splitlines()[-1])
expected = float(torch.arange(1000, 1000 + 4096, dtype=torch.float64).sum())
torch.cuda.synchronize()
doubled = bool(torch.equal(view, torch.arange(1000, 1000 + 4096, dtype=torch.float32, device="cuda") * 2))
print(json.dumps({**answer, "expected": expected, "offset": wire["offset"], "doubledInPlace": doubled}))
`;

const MAKE_MODELS = String.raw`
import os, sys
import torch
out = sys.argv[1]

class PlusOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

os.makedirs(os.path.join(out, "ts_plus_one", "1"), exist_ok=True)
torch.jit.save(torch.jit.script(PlusOne().eval()), os.path.join(out, "ts_plus_one", "1", "model.pt"))
print("ok")
`;

// 1. A Python model taking its input on the GPU and returning a tensor made there.
const PY_DOUBLE = `
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            x = torch.from_dlpack(t)
            y = x * 2
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", y)
            where = np.array([t.is_cpu(), x.is_cuda, out.is_cpu()], dtype=np.uint8)
            responses.append(pb_utils.InferenceResponse([out, pb_utils.Tensor("WHERE", where)]))
        return responses
`;

// 2. BLS on the device: x -> ts_plus_one -> * 3 (torch, here) -> ts_plus_one.
const PY_BLS = `
import numpy as np
import torch
import triton_python_backend_utils as pb_utils

GPU = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0)


def call(tensor):
    response = pb_utils.InferenceRequest(
        model_name="ts_plus_one", inputs=[tensor], requested_output_names=["OUTPUT__0"], preferred_memory=GPU
    ).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUTPUT__0")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            first = call(pb_utils.Tensor.from_dlpack("INPUT__0", x.to_dlpack()))
            y = torch.from_dlpack(first) * 3
            second = call(pb_utils.Tensor.from_dlpack("INPUT__0", y))
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", torch.from_dlpack(second.to_dlpack()))
            where = np.array([x.is_cpu(), first.is_cpu(), y.is_cuda, second.is_cpu()], dtype=np.uint8)
            responses.append(pb_utils.InferenceResponse([out, pb_utils.Tensor("WHERE", where)]))
        return responses
`;

// Decoupled: three responses, each a tensor made on the GPU from the GPU input (x * 1, x * 2, x * 3).
const PY_DECOUPLED = `
import threading
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "INPUT0"))
            sender = request.get_response_sender()

            def answer(x=x, sender=sender):
                for k in (1, 2, 3):
                    out = pb_utils.Tensor.from_dlpack("OUTPUT0", x * k)
                    where = np.array([out.is_cpu(), x.is_cuda], dtype=np.uint8)
                    sender.send(pb_utils.InferenceResponse([out, pb_utils.Tensor("WHERE", where)]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

            threading.Thread(target=answer).start()
        return None
`;

function run(command, args, logFile, env = process.env) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env });
    const chunks = [];
    child.stdout.on("data", (d) => chunks.push(d));
    child.stderr.on("data", (d) => chunks.push(d));
    child.on("error", reject);
    child.on("exit", (code) => {
      const text = Buffer.concat(chunks).toString();
      writeFileSync(logFile, text);
      if (code === 0) resolve(text.trim().split("\n").pop());
      else reject(new Error(`${command} exited with ${code}: ${text.slice(-2000)}`));
    });
  });
}

const fp32 = (name, dims) => `{ name: "${name}" data_type: TYPE_FP32 dims: [ ${dims.join(", ")} ] }`;
const where = `{ name: "WHERE" data_type: TYPE_UINT8 dims: [ -1 ] }`;

function pythonModel(repo, name, source, force, gpu, cpu) {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(join(repo, name, "1", "model.py"), source);
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"\nbackend: "python"\nmax_batch_size: 0\n` +
      `input [ ${fp32("INPUT0", [-1])} ]\noutput [ ${fp32("OUTPUT0", [-1])}, ${where} ]\n` +
      `instance_group [ { count: 1 kind: ${cpu ? "KIND_CPU" : `KIND_GPU gpus: [ ${gpu} ]`} } ]\n` +
      `parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "${force}" } }\n`,
  );
}

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-python-gpu-")));
  const python = arg("python", "python3");
  const gpu = Number(arg("gpu", "0"));
  const cpu = arg("device", "cuda") === "cpu";
  const requests = Number(arg("requests", cpu ? "50" : "1000"));
  mkdirSync(out, { recursive: true });
  const { results, check, attempt } = createChecks();
  const figures = {};
  const pyEnv = { ...process.env, PYTHONPATH: [STUB_DIR, process.env.PYTHONPATH].filter(Boolean).join(":") };

  // 0. galley_cuda alone.
  if (!cpu)
    await attempt("galley_cuda between two processes", async () => {
      const script = join(out, "ipc_check.py");
      writeFileSync(script, IPC_CHECK);
      const r = JSON.parse(await run(python, [script], join(out, "ipc_check.log"), pyEnv));
      figures.ipcCheck = r;
      check(
        "galley_cuda: torch.from_dlpack on the opened handle is on CUDA at the mapped pointer",
        r.ok === true,
        JSON.stringify(r),
      );
      check(
        "galley_cuda: the other process reads the same bytes (offset in the allocation kept)",
        r.sum === r.expected,
        `${r.sum} vs ${r.expected}, offset ${r.offset}`,
      );
      check("galley_cuda: its write is seen by the exporter (same memory)", r.doubledInPlace === true);
      check("galley_cuda: deleter ran once, mapping closed", r.released === 1 && r.mappings === 0, JSON.stringify(r));
    });

  const repo = join(out, "models");
  mkdirSync(repo, { recursive: true });
  const script = join(out, "make_models.py");
  writeFileSync(script, MAKE_MODELS);
  await run(python, [script, repo], join(out, "make_models.log"));
  writeFileSync(
    join(repo, "ts_plus_one", "config.pbtxt"),
    `name: "ts_plus_one"\nplatform: "pytorch_libtorch"\nmax_batch_size: 0\n` +
      `input [ ${fp32("INPUT__0", [-1])} ]\noutput [ ${fp32("OUTPUT__0", [-1])} ]\n` +
      `instance_group [ { count: 1 kind: ${cpu ? "KIND_CPU" : `KIND_GPU gpus: [ ${gpu} ]`} } ]\n`,
  );
  pythonModel(repo, "py_double", PY_DOUBLE, "no", gpu, cpu);
  pythonModel(repo, "py_double_cpu", cpu ? PY_DOUBLE : PY_DOUBLE.replace("x * 2", "(x * 2).cuda()"), "yes", gpu, cpu);
  pythonModel(repo, "py_bls", PY_BLS, "no", gpu, cpu);
  pythonModel(repo, "py_decoupled", PY_DECOUPLED, "no", gpu, cpu);
  writeFileSync(
    join(repo, "py_decoupled", "config.pbtxt"),
    `${readFileSync(join(repo, "py_decoupled", "config.pbtxt"), "utf8")}model_transaction_policy { decoupled: true }\n`,
  );

  // 2d. CUDA region → libtorch → model.py on a KIND_CPU instance → libtorch → CUDA region.
  pythonModel(repo, "py_double_any", PY_DOUBLE, "no", gpu, true);
  mkdirSync(join(repo, "ens_mixed", "1"), { recursive: true });
  const stepIo = (key, value) => `${key} { key: "${value[0]}" value: "${value[1]}" }`;
  const ensembleStep = (model, inputs, outputs) =>
    `{ model_name: "${model}" model_version: -1 ${inputs.map((i) => stepIo("input_map", i)).join(" ")} ${outputs
      .map((o) => stepIo("output_map", o))
      .join(" ")} }`;
  writeFileSync(
    join(repo, "ens_mixed", "config.pbtxt"),
    `name: "ens_mixed"\nplatform: "ensemble"\nmax_batch_size: 0\n` +
      `input [ ${fp32("INPUT0", [-1])} ]\noutput [ ${fp32("OUT", [-1])}, ${where} ]\n` +
      `ensemble_scheduling { step [ ${[
        ensembleStep("ts_plus_one", [["INPUT__0", "INPUT0"]], [["OUTPUT__0", "a"]]),
        ensembleStep(
          "py_double_any",
          [["INPUT0", "a"]],
          [
            ["OUTPUT0", "b"],
            ["WHERE", "WHERE"],
          ],
        ),
        ensembleStep("ts_plus_one", [["INPUT__0", "b"]], [["OUTPUT__0", "OUT"]]),
      ].join(", ")} ] }\n`,
  );

  // 2e. NVIDIA's DLPack QA models, unchanged (on a CPU machine, their CUDA calls made CPU ones).
  const qa = arg("triton-qa", TRITON_QA);
  const qaModels = existsSync(qa);
  const asShipped = (text) => (cpu ? text.replaceAll(/"cuda(:0)?"/g, '"cpu"').replaceAll(".cuda()", ".cpu()") : text);
  const qaModel = (source, name = source) => {
    const from = join(qa, source);
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(join(repo, name, "1", "model.py"), asShipped(readFileSync(join(from, "model.py"), "utf8")));
    // As NVIDIA's io test.sh renames its copies (sed of the name line).
    const config = readFileSync(join(from, "config.pbtxt"), "utf8");
    const renamed = config.replace(/^name:.*$/m, `name: "${name}"`);
    writeFileSync(join(repo, name, "config.pbtxt"), cpu ? renamed.replaceAll("KIND_GPU", "KIND_CPU") : renamed);
  };
  if (qaModels) {
    for (const name of ["dlpack_identity", "dlpack_add_sub", "dlpack_empty_output", "variable_gpu_output"])
      qaModel(name);
    for (const i of [1, 2, 3]) qaModel("dlpack_io_identity", `dlpack_io_identity_${i}`);
    mkdirSync(join(repo, "ensemble_io", "1"), { recursive: true });
    cpSync(join(qa, "ensemble_io", "config.pbtxt"), join(repo, "ensemble_io", "config.pbtxt"));
    if (!cpu) {
      qaModel("dlpack_test");
      mkdirSync(join(out, "stand-ins", "cupy"), { recursive: true });
      writeFileSync(join(out, "stand-ins", "cupy", "__init__.py"), CUPY_STAND_IN);
    }
  }

  const server = await forkServer(repo, python, {
    env: {
      ...process.env,
      PYTHONPATH: [join(out, "stand-ins"), process.env.PYTHONPATH].filter(Boolean).join(":"),
    },
  });
  const { ports, logs, transfers } = server;
  check("server starts with the models", ports.failed.length === 0, JSON.stringify(ports.failed));
  const delta = transferDelta;
  const grpc = createGrpcClient({ baseUrl: `http://127.0.0.1:${ports.grpc}` });
  const n = 1 << 18; // 1 MiB of FP32
  const bytes = n * 4;
  const input = new Float32Array(n).map((_, i) => (i % 1000) / 8);
  const region = cpu ? undefined : await CudaSharedMemory.create(bytes, { device: gpu, client: grpc });
  await region?.write(0, new Uint8Array(input.buffer));
  const outRegion = cpu ? undefined : await CudaSharedMemory.create(bytes, { device: gpu, client: grpc });
  const infer = (model) =>
    grpc.infer(model, {
      inputs: {
        INPUT0: region
          ? region.input("FP32", [n], 0, bytes)
          : { datatype: "FP32", shape: [n], data: new Uint8Array(input.buffer) },
      },
    });
  // Where tensors are, as the models report them: on a GPU machine, and in the CPU check.
  const onGpu = (gpuWhere, cpuWhere) => (cpu ? cpuWhere : gpuWhere);
  const deviceToHost = cpu ? 0 : bytes;
  const equal = (got, f) => got.length === n && got.every((v, i) => v === f(input[i]));

  try {
    // 1.
    await attempt("FORCE_CPU_ONLY_INPUT_TENSORS no", async () => {
      const before = await transfers();
      const result = await infer("py_double");
      const counts = delta(before, await transfers(), "py_double");
      const w = [...result.output("WHERE").data];
      check(
        "input on the GPU: is_cpu() false, torch.from_dlpack is CUDA, output is_cpu() false",
        w.join() === onGpu("0,1,0", "1,0,1"),
        w.join(),
      );
      check(
        "py_double: output = 2 × input",
        equal(result.output("OUTPUT0").fp32(), (v) => v * 2),
      );
      check(
        "py_double: no host copy of the input; the output comes to the host once for gRPC",
        counts.hostToDevice === 0 && counts.deviceToHost === deviceToHost,
        JSON.stringify(counts),
      );
      figures.pyDouble = counts;
      const hostRun = await infer("py_double_cpu");
      const wc = [...hostRun.output("WHERE").data];
      check("FORCE_CPU_ONLY_INPUT_TENSORS yes: the input is a host tensor", wc[0] === 1 && wc[1] === 0, wc.join());
      check(
        "py_double_cpu: output = 2 × input",
        equal(hostRun.output("OUTPUT0").fp32(), (v) => v * 2),
      );
    });

    // 2.
    await attempt("BLS on the device", async () => {
      const before = await transfers();
      const result = await infer("py_bls");
      const after = await transfers();
      const w = [...result.output("WHERE").data];
      check(
        "py_bls: input, BLS outputs and torch result all on the GPU",
        w.join() === onGpu("0,0,1,0", "1,1,0,1"),
        w.join(),
      );
      check(
        "py_bls: output = (x + 1) × 3 + 1",
        equal(result.output("OUTPUT0").fp32(), (v) => (v + 1) * 3 + 1),
      );
      const ts = delta(before, after, "ts_plus_one");
      const py = delta(before, after, "py_bls");
      check(
        "py_bls: no host bytes into either model (both calls, model.py's torch result)",
        ts.hostToDevice === 0 && py.hostToDevice === 0,
        JSON.stringify({ ts, py }),
      );
      check(
        "py_bls: host bytes only for the client's output, read once from the memory it is in",
        ts.deviceToHost + py.deviceToHost === deviceToHost,
        JSON.stringify({ ts, py }),
      );
      figures.pyBls = { tsPlusOne: ts, pyBls: py };
    });

    // 2b. Decoupled responses carrying GPU tensors.
    await attempt("decoupled responses with GPU tensors", async () => {
      const before = await transfers();
      const answers = [];
      const request = {
        inputs: {
          INPUT0: region
            ? region.input("FP32", [n], 0, bytes)
            : { datatype: "FP32", shape: [n], data: new Uint8Array(input.buffer) },
        },
      };
      for await (const result of grpc.streamInfer("py_decoupled", request)) answers.push(result);
      const counts = delta(before, await transfers(), "py_decoupled");
      const withOutputs = answers.filter((a) => a.outputs.OUTPUT0 !== undefined);
      check("py_decoupled: three responses", withOutputs.length === 3, String(answers.length));
      check(
        "py_decoupled: response k = k × input, made on the GPU",
        withOutputs.every(
          (a, i) =>
            equal(a.output("OUTPUT0").fp32(), (v) => v * (i + 1)) &&
            [...a.output("WHERE").data].join() === onGpu("0,1", "1,0"),
        ),
        withOutputs
          .map(
            (a, i) =>
              `${i + 1}: where ${[...a.output("WHERE").data].join()} ok ${equal(a.output("OUTPUT0").fp32(), (v) => v * (i + 1))}`,
          )
          .join("; "),
      );
      check(
        "py_decoupled: host bytes only for the client's outputs",
        counts.hostToDevice === 0 && counts.deviceToHost === 3 * deviceToHost,
        JSON.stringify(counts),
      );
    });

    // 2c. An output made on the GPU into the client's CUDA region.
    if (outRegion)
      await attempt("GPU output into a CUDA region", async () => {
        const before = await transfers();
        const result = await grpc.infer("py_double", {
          inputs: { INPUT0: region.input("FP32", [n], 0, bytes) },
          outputs: [outRegion.output("OUTPUT0", 0, bytes), { name: "WHERE" }],
        });
        const counts = delta(before, await transfers(), "py_double");
        const got = new Float32Array((await outRegion.read(0, bytes)).slice().buffer);
        check(
          "py_double → CUDA region: output = 2 × input",
          equal(got, (v) => v * 2),
        );
        check(
          "py_double → CUDA region: 0 host bytes (the output copied device to device)",
          counts.hostToDevice === 0 && counts.deviceToHost === 0,
          `${JSON.stringify(counts)}, WHERE ${[...result.output("WHERE").data].join()}`,
        );
        figures.pyDoubleIntoRegion = counts;
      });

    // 2d. The mixed ensemble.
    await attempt("ensemble through a Python step on the GPU", async () => {
      const before = await transfers();
      const result = await grpc.infer("ens_mixed", {
        inputs: {
          INPUT0: region
            ? region.input("FP32", [n], 0, bytes)
            : { datatype: "FP32", shape: [n], data: new Uint8Array(input.buffer) },
        },
        outputs: [outRegion ? outRegion.output("OUT", 0, bytes) : { name: "OUT" }, { name: "WHERE" }],
      });
      const after = await transfers();
      const got = outRegion
        ? new Float32Array((await outRegion.read(0, bytes)).slice().buffer)
        : result.output("OUT").fp32();
      check(
        "ens_mixed: OUT = 2 × (x + 1) + 1",
        equal(got, (v) => 2 * (v + 1) + 1),
      );
      const w = [...result.output("WHERE").data].join();
      check("ens_mixed: the KIND_CPU Python step gets its input on the GPU", w === onGpu("0,1,0", "1,0,1"), w);
      const ts = delta(before, after, "ts_plus_one");
      const py = delta(before, after, "py_double_any");
      figures.ensMixed = { tsPlusOne: ts, pyDoubleAny: py };
      if (!cpu)
        check(
          "ens_mixed: 0 host bytes in every step (device copies only)",
          [ts, py].every((c) => c.hostToDevice === 0 && c.deviceToHost === 0),
          JSON.stringify(figures.ensMixed),
        );
    });

    // 2e. NVIDIA's DLPack models.
    if (!qaModels) check(`NVIDIA's DLPack QA models found in ${qa}`, false);
    else {
      await attempt("dlpack_identity", async () => {
        // As python_test.py's test_dlpack_tensor_error: a CUDA region in, an output region too small.
        const data = new Float32Array(1000).map((_, i) => i / 4);
        const raw = new Uint8Array(data.buffer);
        const identityIn = cpu
          ? undefined
          : await CudaSharedMemory.create(raw.byteLength, { device: gpu, client: grpc });
        const tiny = cpu ? undefined : await CudaSharedMemory.create(1, { device: gpu, client: grpc });
        try {
          await identityIn?.write(0, raw);
          const input = identityIn
            ? identityIn.input("FP32", [1, 1000], 0, raw.byteLength)
            : { datatype: "FP32", shape: [1, 1000], data: raw };
          const ok = await grpc.infer("dlpack_identity", { inputs: { INPUT0: input } });
          check("dlpack_identity: output = input", Buffer.from(ok.output("OUTPUT0").data).equals(Buffer.from(raw)));
          if (tiny) {
            const error = await grpc
              .infer("dlpack_identity", { inputs: { INPUT0: input }, outputs: [tiny.output("OUTPUT0", 0, 1)] })
              .then(
                () => "no error",
                (e) => e.message,
              );
            check(
              "dlpack_identity: a 1-byte output region → 'should be at least 4000 bytes to hold the results'",
              error.includes("should be at least 4000 bytes to hold the results"),
              error,
            );
          }
        } finally {
          await identityIn?.dispose().catch(() => {});
          await tiny?.dispose().catch(() => {});
        }
      });

      await attempt("dlpack_add_sub", async () => {
        const a = new Float32Array(16).map((_, i) => i + 0.5);
        const b = new Float32Array(16).map((_, i) => 2 * i - 3);
        const both = new Uint8Array(128);
        both.set(new Uint8Array(a.buffer), 0);
        both.set(new Uint8Array(b.buffer), 64);
        const r = cpu ? undefined : await CudaSharedMemory.create(128, { device: gpu, client: grpc });
        try {
          await r?.write(0, both);
          for (const where of r ? ["GPU", "host"] : ["host"]) {
            const inputs =
              where === "GPU" && r
                ? { INPUT0: r.input("FP32", [16], 0, 64), INPUT1: r.input("FP32", [16], 64, 64) }
                : {
                    INPUT0: { datatype: "FP32", shape: [16], data: new Uint8Array(a.buffer) },
                    INPUT1: { datatype: "FP32", shape: [16], data: new Uint8Array(b.buffer) },
                  };
            const result = await grpc.infer("dlpack_add_sub", { inputs });
            const sum = result.output("OUTPUT0").fp32();
            const diff = result.output("OUTPUT1").fp32();
            check(
              `dlpack_add_sub (${where} inputs): OUTPUT0 = a + b, OUTPUT1 = a − b`,
              a.every((v, i) => sum[i] === v + b[i] && diff[i] === v - b[i]),
            );
          }
        } finally {
          await r?.dispose().catch(() => {});
        }
      });

      await attempt("ensemble_io", async () => {
        // As io_test.py's test_ensemble_io (its default trial): every GPU/CPU choice of the three steps.
        const x = new Float32Array(1000).map((_, i) => Math.sin(i));
        let passed = 0;
        const failed = [];
        for (let k = 0; k < 8; k++) {
          const flags = Uint8Array.of(k & 1, (k >> 1) & 1, (k >> 2) & 1);
          const results = [];
          for await (const r of grpc.streamInfer("ensemble_io", {
            inputs: {
              INPUT0: { datatype: "FP32", shape: [1000], data: new Uint8Array(x.buffer) },
              GPU_OUTPUT: { datatype: "BOOL", shape: [3], data: flags },
            },
          }))
            results.push(r);
          const got = results
            .find((r) => r.outputs.OUTPUT0)
            ?.output("OUTPUT0")
            .fp32();
          if (got && got.length === 1000 && got.every((v, i) => v === x[i])) passed++;
          else failed.push([...flags].join(""));
        }
        check(
          "ensemble_io: OUTPUT0 = INPUT0 for all 8 placements (with the BLS check inside each step)",
          passed === 8,
          failed.join(" "),
        );
      });

      await attempt("dlpack_empty_output", async () => {
        const result = await grpc.infer("dlpack_empty_output", {
          inputs: { INPUT: { datatype: "FP32", shape: [1, 1], data: new Uint8Array(new Float32Array([1]).buffer) } },
        });
        check("dlpack_empty_output: an empty GPU output arrives empty", result.output("OUTPUT").data.byteLength === 0);
      });

      await attempt("variable_gpu_output", async () => {
        const one = { INPUT: { datatype: "FP32", shape: [1, 1], data: new Uint8Array(new Float32Array([1]).buffer) } };
        const answers = await Promise.all(
          Array.from({ length: 5 }, () => grpc.infer("variable_gpu_output", { inputs: one })),
        );
        const sizes = answers.map((a) => a.output("OUTPUT").fp32());
        const sorted = [...sizes].sort((p, q) => p.length - q.length);
        check(
          "variable_gpu_output: five requests in one batch, response i has i + 1 elements equal to i + 1",
          sorted.every((v, i) => v.length === i + 1 && v.every((e) => e === i + 1)),
          sizes.map((v) => `[${[...v].join(",")}]`).join(" "),
        );
      });

      if (!cpu)
        await attempt("dlpack_test", async () => {
          const from = Buffer.concat(logs).length;
          const result = await grpc.infer("dlpack_test", { inputs: {} });
          const ok = values(result.output("OUTPUT0").data, "FP16")[0] === 1;
          // What the stub wrote while it ran the suite (its stderr reaches the server's log, a
          // moment after the answer perhaps: the summary is waited for, 5 s at most).
          const written = () => Buffer.concat(logs).subarray(from).toString();
          for (let waited = 0; !/Ran \d+ tests?/.test(written()) && waited < 5000; waited += 50)
            await new Promise((r) => setTimeout(r, 50));
          const log = written();
          const ran = log.match(/Ran (\d+) tests?/g)?.at(-1) ?? "";
          // The stub's stderr reaches the server's log line by line (perhaps prefixed).
          const outcome = log.match(/\b(?:OK|FAILED)(?: \([^)\n]*\))?(?=\s*$)/gm)?.at(-1) ?? "";
          const skipped = [...log.matchAll(/(test_\w+) \(model\.PBTensorTest(?:\.\w+)?\)[^\n]*\.\.\. skipped/g)].map(
            (m) => m[1],
          );
          const failures = [...log.matchAll(/(?:FAIL|ERROR): (test_\w+)/g)].map((m) => m[1]);
          const errors = [...log.matchAll(/^.*\b\w*(?:Error|Exception): .*$/gm)].map((m) => m[0].trim().slice(0, 300));
          figures.dlpackTest = { ran, outcome, skipped, failures, errors };
          check(
            `dlpack_test: its unittest suite passes in execute (${ran}, ${outcome})`,
            ok,
            [`skipped: ${skipped.join(" ")}`, `failed: ${failures.join(" ")}`, ...errors.slice(-6)].join(" | "),
          );
        });
    }

    // 3.
    await attempt("GPU memory over many requests", async () => {
      for (let i = 0; i < 20; i++) {
        await infer("py_double");
        await infer("py_bls");
      }
      const start = gpuMemoryMiB(gpu);
      const t0 = performance.now();
      const curve = [];
      for (let i = 1; i <= requests; i++) {
        await infer("py_double");
        await infer("py_bls");
        if (i % Math.max(1, Math.floor(requests / 10)) === 0) curve.push([i, gpuMemoryMiB(gpu)]);
      }
      const ms = (performance.now() - t0) / requests;
      const end = gpuMemoryMiB(gpu);
      figures.memory = { startMiB: start, endMiB: end, curve, msPerPair: ms };
      if (!cpu)
        check(
          `GPU memory flat over ${requests} × (py_double + py_bls)`,
          end - start <= 64,
          `${start} → ${end} MiB; curve ${JSON.stringify(curve)}`,
        );
      console.log(`one py_double + one py_bls request: ${ms.toFixed(2)} ms`);
      // What each stub costs on the GPU (its CUDA context, torch's cache): issue 50 item 3.
      figures.stubGpuMiB = gpuProcesses();
      console.log(`GPU memory per process (MiB): ${JSON.stringify(figures.stubGpuMiB)}`);
    });
  } finally {
    await region?.dispose().catch(() => {});
    await outRegion?.dispose().catch(() => {});
    await server.stop(join(out, "server.log"));
  }
  finishChecks(out, "python-gpu-tensors", results, figures);
}

if (process.argv[2] === "--serve") await serveChecks(process.argv.slice(3));
else await main();
