// Several GPUs in one server (issue 55), end to end: Galley servers in child processes (CUDA IPC
// handles do not open in the process that made them) with libtorch models made here by python3's
// torch, and this process as the client. Runs on any number of GPUs; the parts that need two print
// "NOT RUN ...: needs ≥ 2 GPUs" (counted apart, never as passed) on a machine of one.
//   1. Data parallel: a DiT-shaped denoiser (default DiT-XL/2: 28 blocks, width 1152, 16 heads, a
//      4×32×32 latent = 256 tokens, FP16) with instance_group gpus [0] vs gpus [0, 1] (count 1, and
//      count 2): outputs against Python's, throughput with 16 requests in flight (target ≥ 1.8× with
//      two GPUs), executions per GPU from galley_gpu_execution_count, each GPU's memory (nvidia-smi).
//   2. Pipeline stages on different GPUs: an ensemble denoise → decode → upscale, all on GPU 0 vs
//      denoise on GPU 0 and decode + upscale on GPU 1: outputs equal, 0 host bytes between the
//      stages, the bytes copied between GPUs (galley_tensor_transfer_bytes path between_gpus), and
//      whether the copy was peer to peer (probeCuda's peerAccess) or staged by the driver.
//   3. CUDA shared memory: a region on device 1 read in place by a model on GPU 1 and copied device
//      to device for one on GPU 0 (its output written back into the region on GPU 1): 0 host bytes.
//      On one GPU: the region on GPU 0 in place.
//   4. Faults: a config naming a GPU the server does not have fails with Triton's load error;
//      CUDA_VISIBLE_DEVICES=<last GPU> leaves the server one GPU, numbered 0, on that physical GPU
//      (its memory grows, GPU 0's does not; /metrics lists only its UUID), and a group naming GPU 1
//      fails; CUDA_VISIBLE_DEVICES="" leaves none.
// prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry; device-run.sh
// runs it with GALLEY_GPU_STEPS=multigpu:
//
//   node packages/backends-native/build/gpu-carry/multi-gpu.mjs --out=$OUT/multi-gpu
//
// Options: --out=DIR (multi-gpu.json, logs), --python=python3, --seconds=10 (per throughput run),
// --latent=32 --depth=28 --width=1152 --heads=16 (the denoiser), --clients=16, --require-gpus=N
// (fail, not skip, the parts that need more GPUs than this machine has), --device=cpu (the same on
// a CPU machine, small models, KIND_CPU instances, no CUDA parts: a check of this script).
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaSharedMemory, createGrpcClient } from "@galley/client";
import { forkServer, serveChecks } from "./check-server.mjs";
import { createChecks, gpuMemoryMiB, values } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;

// The models, made by python3's torch, and the expected outputs of fixed inputs (on GPU 0).
const MAKE_MODELS = `
import json, math, os, sys
import torch
import torch.nn.functional as F
out, device, latent, depth, width, heads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
dtype = torch.float16 if device.startswith("cuda") else torch.float32
fused = hasattr(F, "scaled_dot_product_attention") and device.startswith("cuda")

class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp1 = torch.nn.Linear(width, 4 * width)
        self.mlp2 = torch.nn.Linear(4 * width, width)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = self.attend(q, k, v, c // self.heads)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp2(F.gelu(self.mlp1(self.norm2(x))))
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v

# SDPA where this torch has it on a GPU (flash attention); the plain product elsewhere (older libtorch).
class FusedBlock(Block):
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

# A DiT-shaped denoiser on a 4-channel latent: 2×2 patches → width → blocks → patches back.
class Denoiser(torch.nn.Module):
    def __init__(self, depth: int, width: int, heads: int):
        super().__init__()
        self.embed = torch.nn.Linear(16, width)
        self.blocks = torch.nn.ModuleList([(FusedBlock if fused else Block)(width, heads) for _ in range(depth)])
        self.norm = torch.nn.LayerNorm(width)
        self.out = torch.nn.Linear(width, 16)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), 16)
        t = self.embed(t)
        for block in self.blocks:
            t = block(t)
        t = self.out(self.norm(t))
        return x - 0.1 * t.reshape(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)

# The decoder (latent → 3 channels, ×4) and super-resolution (×2) of the pipeline.
class Decode(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 3, 3, padding=1)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(F.interpolate(x, scale_factor=4.0, mode="nearest")))

class Upscale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)

class PlusOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

torch.manual_seed(0)
models = {
    "denoiser": Denoiser(depth, width, heads),
    "denoise_small": Denoiser(2, 64, 4),
    "decode": Decode(),
    "upscale": Upscale(),
    "plus_one": PlusOne(),
}
dev = torch.device(device)
for name, module in models.items():
    module = module.to(dev, dtype).eval()
    models[name] = module
    os.makedirs(os.path.join(out, name), exist_ok=True)
    torch.jit.save(torch.jit.script(module), os.path.join(out, name, "model.pt"))
g = torch.Generator().manual_seed(7)
x = torch.randn((1, 4, latent, latent), generator=g).to(dtype)
small = (torch.rand((1 << 20,), generator=g) * 100).to(dtype)
with torch.inference_mode():
    m = {k: v for k, v in models.items()}
    denoised = m["denoiser"](x.to(dev)).cpu()
    piped = m["upscale"](m["decode"](m["denoise_small"](x.to(dev)))).cpu()
    plus = m["plus_one"](small.to(dev)).cpu()
for name, t in [("latent", x), ("denoiser.expected", denoised), ("pipe.expected", piped), ("small", small), ("small.expected", plus)]:
    t.contiguous().view(torch.uint8).numpy().tofile(os.path.join(out, name + ".bin"))
params = sum(p.numel() for p in models["denoiser"].parameters())
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "parameters": params, "fused": fused}))
`;

function run(command, args, logFile) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
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

/** NVML's GPUs as nvidia-smi lists them (index, uuid, name); empty without a driver. */
function nvidiaGpus() {
  try {
    const text = execFileSync("nvidia-smi", ["--query-gpu=index,uuid,name", "--format=csv,noheader"], {
      encoding: "utf8",
    });
    return text
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        const [index, uuid, name] = line.split(",").map((v) => v.trim());
        return { index: Number(index), uuid, name };
      });
  } catch {
    return [];
  }
}

/** Prometheus text → samples { name, labels, value }. */
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries(
      [...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]),
    );
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}
const metric = (samples, name, labels) =>
  samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);

/** A server of `repository` in a child process (with `env`), its gRPC client and its parsed /metrics. */
async function startServer(repository, python, env = process.env) {
  const server = await forkServer(repository, python, { env, metrics: true });
  return {
    ...server,
    grpc: createGrpcClient({ baseUrl: `http://127.0.0.1:${server.ports.grpc}` }),
    metrics: async () => parseMetrics(await server.metricsText()),
  };
}

/** What `model` moved between two transfer snapshots. */
function delta(before, after, model) {
  const zero = { hostToDevice: 0, deviceToHost: 0, onDevice: 0, betweenGpus: 0 };
  const a = { ...zero, ...after.models[model] };
  const b = { ...zero, ...before.models[model] };
  return Object.fromEntries(Object.keys(zero).map((k) => [k, a[k] - b[k]]));
}

const same = (a, b) => a.byteLength === b.byteLength && Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
function maxDiff(a, b, datatype) {
  const x = values(a, datatype);
  const y = values(b, datatype);
  if (x.length !== y.length) return Number.POSITIVE_INFINITY;
  let d = 0;
  for (let i = 0; i < x.length; i++) d = Math.max(d, Math.abs(x[i] - y[i]));
  return d;
}

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-multi-gpu-")));
  const python = arg("python", "python3");
  const kind = arg("device", "cuda");
  const cuda = kind === "cuda";
  const seconds = Number(arg("seconds", cuda ? "10" : "2"));
  const clients = Number(arg("clients", "16"));
  const latent = Number(arg("latent", cuda ? "32" : "8"));
  const depth = Number(arg("depth", cuda ? "28" : "2"));
  const width = Number(arg("width", cuda ? "1152" : "64"));
  const heads = Number(arg("heads", cuda ? "16" : "4"));
  const requireGpus = Number(arg("require-gpus", "0"));
  mkdirSync(out, { recursive: true });
  const { results, check, attempt } = createChecks();
  const figures = {};
  const notRun = [];

  // The machine: CUDA's GPUs (after CUDA_VISIBLE_DEVICES) and which pairs are peers; NVML's list.
  let gpus = 0;
  let peerAccess = [];
  if (cuda) {
    const { probeCuda } = await import("@galley/backends-native");
    const probe = await probeCuda();
    check("CUDA available", probe.available, probe.error);
    gpus = probe.available ? probe.deviceCount : 0;
    peerAccess = probe.peerAccess ?? [];
  }
  const nvml = nvidiaGpus();
  figures.machine = { cudaGpus: gpus, peerAccess, nvml };
  console.log(
    `GPUs: ${gpus} (CUDA), ${nvml.map((g) => `${g.index}: ${g.name} ${g.uuid}`).join("; ") || "none (NVML)"}`,
  );
  if (gpus > 1) console.log(`peer access (row: reader, column: memory of): ${JSON.stringify(peerAccess)}`);
  const two = gpus >= 2;
  /** A part that needs `n` GPUs: run it, or say it is not run (a failure with --require-gpus ≥ n). */
  const needs = async (n, name, body) => {
    if (!cuda) return void notRun.push({ name, why: "--device=cpu" });
    if (gpus >= n) return attempt(name, body);
    const why = `needs ≥ ${n} GPUs, this machine has ${gpus}`;
    if (requireGpus >= n) return check(name, false, why);
    notRun.push({ name, why });
    console.log(`NOT RUN ${name}: ${why}`);
  };

  const repo = join(out, "models");
  const made = join(out, "made");
  mkdirSync(repo, { recursive: true });
  // TorchScript reads the modules' source: the script is a file, not `-c`.
  const script = join(out, "make_models.py");
  writeFileSync(script, MAKE_MODELS);
  const torch = JSON.parse(
    await run(
      python,
      [script, made, cuda ? "cuda:0" : "cpu", ...[latent, depth, width, heads].map(String)],
      join(out, "python.log"),
    ),
  );
  figures.torch = torch;
  console.log(
    `models made with torch ${torch.torch} (CUDA ${torch.cuda}): denoiser ${(torch.parameters / 1e6).toFixed(0)} M parameters`,
  );
  const dt = cuda ? "FP16" : "FP32";
  const tensor = (name, dims) => `{ name: "${name}" data_type: TYPE_${dt} dims: [ ${dims.join(", ")} ] }`;
  const group = (list, count = 1) =>
    cuda
      ? `{ count: ${count} kind: KIND_GPU gpus: [ ${list.join(", ")} ] }`
      : `{ count: ${count * list.length} kind: KIND_CPU }`;
  /** A libtorch model `name` from made/`file`, on `list` GPUs (KIND_CPU in CPU mode). */
  const model = (name, file, io, list, count = 1) => {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(join(repo, name, "1", "model.pt"), readFileSync(join(made, file, "model.pt")));
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"\nplatform: "pytorch_libtorch"\n${io}instance_group [ ${group(list, count)} ]\n`,
    );
  };
  const batched = (input, output) =>
    `max_batch_size: 8\ndynamic_batching { }\ninput [ ${input} ]\noutput [ ${output} ]\n`;
  const L = [4, latent, latent];
  const dpIo = batched(tensor("INPUT__0", L), tensor("OUTPUT__0", L));
  model("dp_one", "denoiser", dpIo, [0]);
  if (two || !cuda) {
    model("dp_two", "denoiser", dpIo, [0, 1]);
    model("dp_two_c2", "denoiser", dpIo, [0, 1], 2);
  }
  // The pipeline's stages: denoise on GPU 0; decode and upscale on GPU 0 (same) or 1 (split).
  const img = [3, latent * 4, latent * 4];
  const big = [3, latent * 8, latent * 8];
  model("p_denoise_g0", "denoise_small", batched(tensor("INPUT__0", L), tensor("OUTPUT__0", L)), [0]);
  const far = two ? 1 : 0;
  for (const g of new Set([0, far])) {
    model(`p_decode_g${g}`, "decode", batched(tensor("INPUT__0", L), tensor("OUTPUT__0", img)), [g]);
    model(`p_upscale_g${g}`, "upscale", batched(tensor("INPUT__0", img), tensor("OUTPUT__0", big)), [g]);
  }
  const ensemble = (name, g) => {
    const step = (m, i, o) =>
      `  { model_name: "${m}" model_version: -1 input_map { key: "INPUT__0" value: "${i}" } output_map { key: "OUTPUT__0" value: "${o}" } }`;
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"\nplatform: "ensemble"\nmax_batch_size: 8\ninput [ ${tensor("LATENT", L)} ]\noutput [ ${tensor("VIDEO", big)} ]\n` +
        `ensemble_scheduling { step [\n${step("p_denoise_g0", "LATENT", "clean")},\n${step(`p_decode_g${g}`, "clean", "frames")},\n${step(`p_upscale_g${g}`, "frames", "VIDEO")}\n] }\n`,
    );
  };
  ensemble("pipe_same", 0);
  if (two) ensemble("pipe_split", 1);
  const plusIo = `max_batch_size: 0\ninput [ ${tensor("INPUT__0", [-1])} ]\noutput [ ${tensor("OUTPUT__0", [-1])} ]\n`;
  for (const g of new Set([0, far])) model(`plus_g${g}`, "plus_one", plusIo, [g]);
  // A group naming a GPU the server does not have (the GPU after the last; GPU 0 without any).
  const missing = cuda ? gpus : 0;
  mkdirSync(join(repo, "ghost", "1"), { recursive: true });
  writeFileSync(join(repo, "ghost", "1", "model.pt"), readFileSync(join(made, "plus_one", "model.pt")));
  writeFileSync(
    join(repo, "ghost", "config.pbtxt"),
    `name: "ghost"\nplatform: "pytorch_libtorch"\n${plusIo}instance_group [ { count: 1 kind: KIND_GPU gpus: [ ${cuda ? `0, ${missing}` : "0"} ] } ]\n`,
  );

  const memoryBefore = nvml.map((g) => gpuMemoryMiB(g.index));
  const server = await startServer(repo, python);
  const triton = (list) =>
    `instance group ghost_0 of model ghost specifies invalid or unsupported gpu id ${missing}. GPUs with at least the minimum required CUDA compute compatibility of 7.500000 are: ${list}`;
  try {
    check(
      "server starts; only the model naming a missing GPU fails",
      JSON.stringify(server.ports.failed) === JSON.stringify(["ghost"]),
      JSON.stringify(server.ports.failed),
    );
    figures.memoryLoadedMiB = nvml.map((g, i) => gpuMemoryMiB(g.index) - (memoryBefore[i] ?? 0));
    const latentBytes = readFileSync(join(made, "latent.bin"));
    const input = (bytes, batch = 1) => ({
      INPUT__0: { datatype: dt, shape: [batch, ...L], data: new Uint8Array(bytes) },
    });

    // 4a. Triton's load error for a GPU the server does not have.
    await attempt("faults: missing GPU", async () => {
      const ghost = (await server.grpc.index()).find((e) => e.name === "ghost");
      const list = Array.from({ length: gpus }, (_, i) => i).join(", ");
      check(
        `faults: gpus [${cuda ? `0, ${missing}` : "0"}] on a server of ${gpus} GPU(s): Triton's load error`,
        ghost?.state === "UNAVAILABLE" && ghost.reason.includes(triton(list)),
        ghost?.reason,
      );
    });

    // 1. Data parallel.
    await attempt("data parallel", async () => {
      const expected = readFileSync(join(made, "denoiser.expected.bin"));
      const answers = {};
      for (const name of two || !cuda ? ["dp_one", "dp_two", "dp_two_c2"] : ["dp_one"]) {
        const result = await server.grpc.infer(name, { inputs: input(latentBytes) });
        answers[name] = result.output("OUTPUT__0").data;
        const d = maxDiff(answers[name], expected, dt);
        check(`data parallel: ${name} output close to Python's`, d <= (cuda ? 5e-2 : 1e-3), `max |diff| ${d}`);
      }
      if (answers.dp_two)
        check(
          "data parallel: dp_two answers as dp_one",
          maxDiff(answers.dp_two, answers.dp_one, dt) <= (cuda ? 1e-2 : 1e-5),
          `byte-equal ${same(answers.dp_two, answers.dp_one)}`,
        );
      const rate = async (name) => {
        const end = Date.now() + seconds * 1000;
        let done = 0;
        const worker = async () => {
          while (Date.now() < end) {
            await server.grpc.infer(name, { inputs: input(latentBytes) });
            done++;
          }
        };
        const start = performance.now();
        await Promise.all(Array.from({ length: clients }, worker));
        return (done * 1000) / (performance.now() - start);
      };
      const names = two || !cuda ? ["dp_one", "dp_two", "dp_two_c2"] : ["dp_one"];
      for (const name of names) await rate(name); // warm-up: kernels, allocator, batch sizes
      const before = await server.metrics();
      const rates = {};
      for (const name of names) rates[name] = await rate(name);
      const after = await server.metrics();
      figures.dataParallel = { samplesPerSecond: rates, clients, seconds, tokens: (latent / 2) ** 2, depth, width };
      const executions = (name, device) =>
        metric(after, "galley_gpu_execution_count", { model: name, device: String(device) }) -
        metric(before, "galley_gpu_execution_count", { model: name, device: String(device) });
      if (cuda) {
        const one = executions("dp_one", 0);
        check(
          "data parallel: dp_one runs on GPU 0 only (galley_gpu_execution_count)",
          one > 0 &&
            after.every(
              (s) => s.name !== "galley_gpu_execution_count" || s.labels.model !== "dp_one" || s.labels.device === "0",
            ),
          `${one} executions on GPU 0`,
        );
      }
      if (!two) return;
      for (const name of ["dp_two", "dp_two_c2"]) {
        const per = [0, 1].map((d) => executions(name, d));
        figures.dataParallel[`${name}Executions`] = per;
        check(
          `data parallel: ${name} runs batches on GPU 0 and GPU 1`,
          per[0] > 0 && per[1] > 0 && Math.min(...per) / Math.max(...per) >= 0.5,
          `executions per GPU ${per.join(" / ")}`,
        );
      }
      const grew = figures.memoryLoadedMiB;
      check(
        "data parallel: instances hold memory on GPU 0 and GPU 1 (nvidia-smi)",
        grew[0] > 500 && grew[1] > 500,
        `MiB ${grew.join(", ")}`,
      );
      const ratio = rates.dp_two / rates.dp_one;
      figures.dataParallel.ratio = ratio;
      check(
        "data parallel: 2 GPUs ≥ 1.8× one GPU",
        ratio >= 1.8,
        `${rates.dp_two.toFixed(1)} vs ${rates.dp_one.toFixed(1)} samples/s (${ratio.toFixed(2)}×; count 2: ${rates.dp_two_c2.toFixed(1)})`,
      );
    });
    if (cuda && !two) await needs(2, "data parallel on GPUs 0 and 1 (gpus: [0, 1], count 1 and 2)", async () => {});

    // 2. Pipeline stages on different GPUs.
    const stages = (before, after, g) => {
      const counts = Object.fromEntries(
        ["p_denoise_g0", `p_decode_g${g}`, `p_upscale_g${g}`].map((m) => [m, delta(before, after, m)]),
      );
      const [a, b, c] = Object.values(counts);
      // Host bytes between the stages: what denoise sends out, decode moves either way, upscale takes in.
      return {
        counts,
        between: a.deviceToHost + b.hostToDevice + b.deviceToHost + c.hostToDevice,
        copied: b.betweenGpus,
      };
    };
    const pipeOut = {};
    await attempt("pipeline on one GPU", async () => {
      const before = await server.transfers();
      pipeOut.same = (await server.grpc.infer("pipe_same", { inputs: { LATENT: input(latentBytes).INPUT__0 } })).output(
        "VIDEO",
      ).data;
      const s = stages(before, await server.transfers(), 0);
      figures.pipeSame = s;
      const d = maxDiff(pipeOut.same, readFileSync(join(made, "pipe.expected.bin")), dt);
      check("pipeline (all on GPU 0): output close to Python's", d <= (cuda ? 5e-2 : 1e-3), `max |diff| ${d}`);
      if (cuda)
        check("pipeline (all on GPU 0): 0 host bytes between the stages", s.between === 0, JSON.stringify(s.counts));
    });
    await needs(2, "pipeline: denoise on GPU 0, decode and upscale on GPU 1", async () => {
      const before = await server.transfers();
      const split = (await server.grpc.infer("pipe_split", { inputs: { LATENT: input(latentBytes).INPUT__0 } })).output(
        "VIDEO",
      ).data;
      const s = stages(before, await server.transfers(), 1);
      const route = peerAccess[1]?.[0] ? "peer" : "staged by the driver";
      figures.pipeSplit = { ...s, route };
      check(
        "pipeline split over GPUs 0 → 1: output equals the one-GPU run",
        maxDiff(split, pipeOut.same, dt) <= 1e-2,
        `byte-equal ${same(split, pipeOut.same)}`,
      );
      check("pipeline split: 0 host bytes between the stages", s.between === 0, JSON.stringify(s.counts));
      check(
        `pipeline split: the latent crossed GPU 0 → 1 device to device (${route})`,
        s.copied === latentBytes.byteLength,
        `${s.copied} bytes between GPUs, latent ${latentBytes.byteLength}`,
      );
      const rate = async (name) => {
        const end = Date.now() + seconds * 1000;
        let done = 0;
        const worker = async () => {
          while (Date.now() < end) {
            await server.grpc.infer(name, { inputs: { LATENT: input(latentBytes).INPUT__0 } });
            done++;
          }
        };
        const start = performance.now();
        await Promise.all(Array.from({ length: 8 }, worker));
        return (done * 1000) / (performance.now() - start);
      };
      await rate("pipe_split");
      figures.pipeline = {
        videosPerSecondSame: await rate("pipe_same"),
        videosPerSecondSplit: await rate("pipe_split"),
      };
    });

    // 3. CUDA shared memory on device 1 (GPU 0 on a machine of one).
    if (cuda) {
      const small = readFileSync(join(made, "small.bin"));
      const expected = readFileSync(join(made, "small.expected.bin"));
      const bytes = small.byteLength;
      const shm = async (device, model, inPlace) => {
        const region = await CudaSharedMemory.create(2 * bytes, { device, client: server.grpc });
        try {
          await region.write(0, small);
          await region.write(bytes, new Uint8Array(bytes));
          const before = await server.transfers();
          await server.grpc.infer(model, {
            inputs: { INPUT__0: region.input(dt, [bytes / 2], 0, bytes) },
            outputs: [region.output("OUTPUT__0", bytes, bytes)],
          });
          const counts = delta(before, await server.transfers(), model);
          figures[`shm_${device}_${model}`] = counts;
          const label = `CUDA shm on device ${device}, ${model}`;
          check(`${label}: output bytes equal Python's`, same(await region.read(bytes, bytes), expected));
          check(
            `${label}: ${inPlace ? "read in place" : "copied device to device"}, 0 host bytes`,
            counts.hostToDevice === 0 && counts.deviceToHost === 0 && counts.betweenGpus === (inPlace ? 0 : bytes),
            JSON.stringify(counts),
          );
        } finally {
          await region.dispose();
        }
      };
      await attempt("CUDA shm, one GPU", () => shm(0, "plus_g0", true));
      await needs(2, "CUDA shm: region on device 1 in place on GPU 1, peer to peer for GPU 0", async () => {
        await shm(1, "plus_g1", true);
        await shm(1, "plus_g0", false);
      });
    } else notRun.push({ name: "CUDA shm", why: "--device=cpu" });
  } finally {
    await server.stop(join(out, "server.log"));
  }

  // 4b. CUDA_VISIBLE_DEVICES: the server numbers what it leaves from 0, as CUDA does.
  if (cuda && gpus > 0) {
    await attempt("CUDA_VISIBLE_DEVICES", async () => {
      const last = nvml.at(-1)?.index ?? 0;
      const cvd = join(out, "cvd");
      for (const g of [0, 1]) {
        mkdirSync(join(cvd, `cvd_g${g}`, "1"), { recursive: true });
        writeFileSync(join(cvd, `cvd_g${g}`, "1", "model.pt"), readFileSync(join(made, "plus_one", "model.pt")));
        writeFileSync(
          join(cvd, `cvd_g${g}`, "config.pbtxt"),
          `name: "cvd_g${g}"\nplatform: "pytorch_libtorch"\n${plusIo}instance_group [ { count: 1 kind: KIND_GPU gpus: [ ${g} ] } ]\n`,
        );
      }
      const before = nvml.map((g) => gpuMemoryMiB(g.index));
      const env = { ...process.env, CUDA_VISIBLE_DEVICES: String(last), CUDA_DEVICE_ORDER: "PCI_BUS_ID" };
      const one = await startServer(cvd, python, env);
      try {
        const grew = nvml.map((g, i) => gpuMemoryMiB(g.index) - (before[i] ?? 0));
        figures.cudaVisibleDevices = { visible: String(last), failed: one.ports.failed, grewMiB: grew };
        check(
          `CUDA_VISIBLE_DEVICES=${last}: GPU 0 of the server serves, GPU 1 is refused`,
          JSON.stringify(one.ports.failed) === JSON.stringify(["cvd_g1"]),
          JSON.stringify(one.ports.failed),
        );
        const reason = (await one.grpc.index()).find((e) => e.name === "cvd_g1")?.reason ?? "";
        check(
          `CUDA_VISIBLE_DEVICES=${last}: Triton's load error names the one GPU left, as 0`,
          reason.includes(
            "specifies invalid or unsupported gpu id 1. GPUs with at least the minimum required CUDA compute compatibility of 7.500000 are: 0",
          ),
          reason,
        );
        const r = await one.grpc.infer("cvd_g0", {
          inputs: {
            INPUT__0: {
              datatype: dt,
              shape: [4],
              data: new Uint8Array(new Uint16Array([0x3c00, 0x4000, 0x4200, 0x4400]).buffer),
            },
          },
        });
        check(
          "CUDA_VISIBLE_DEVICES: the model on the server's GPU 0 answers",
          same(r.output("OUTPUT__0").data, new Uint8Array(new Uint16Array([0x4000, 0x4200, 0x4400, 0x4500]).buffer)),
        );
        if (gpus >= 2)
          check(
            `CUDA_VISIBLE_DEVICES=${last}: the memory is on physical GPU ${last}, none on GPU 0 (nvidia-smi)`,
            (grew.at(-1) ?? 0) > 200 && (grew[0] ?? 0) < 100,
            `MiB grown per GPU ${grew.join(", ")}`,
          );
        const uuids = [
          ...new Set(
            (await one.metrics()).filter((s) => s.name === "nv_gpu_memory_total_bytes").map((s) => s.labels.gpu_uuid),
          ),
        ];
        check(
          `CUDA_VISIBLE_DEVICES=${last}: /metrics lists only that GPU`,
          uuids.length === 1 && uuids[0] === nvml.at(-1)?.uuid,
          uuids.join(", "),
        );
      } finally {
        await one.stop(join(out, "server-cvd.log"));
      }
      const none = await startServer(cvd, python, { ...process.env, CUDA_VISIBLE_DEVICES: "" });
      try {
        check(
          'CUDA_VISIBLE_DEVICES="": no GPU for the server, both GPU models refused',
          JSON.stringify([...none.ports.failed].sort()) === JSON.stringify(["cvd_g0", "cvd_g1"]),
          JSON.stringify(none.ports.failed),
        );
      } finally {
        await none.stop(join(out, "server-cvd-none.log"));
      }
    });
  }

  console.log("\nsummary");
  const row = (a, b) => console.log(`${a.padEnd(58)} ${String(b).padStart(16)}`);
  const dp = figures.dataParallel;
  if (dp) {
    for (const [name, rate] of Object.entries(dp.samplesPerSecond))
      row(`${name}, samples/s (${clients} in flight)`, rate.toFixed(1));
    if (dp.ratio !== undefined) row("  2 GPUs / 1 GPU (target ≥ 1.8)", dp.ratio.toFixed(2));
  }
  if (figures.pipeline) {
    row("pipeline all on GPU 0, videos/s (8 in flight)", figures.pipeline.videosPerSecondSame.toFixed(1));
    row(
      `pipeline split 0 → 1 (${figures.pipeSplit?.route}), videos/s`,
      figures.pipeline.videosPerSecondSplit.toFixed(1),
    );
  }
  for (const { name, why } of notRun) row(`NOT RUN ${name}`, why);
  const failed = results.filter((r) => !r.ok);
  console.log(
    `${results.length - failed.length}/${results.length} checks passed${notRun.length ? `, ${notRun.length} part(s) not run (${notRun[0].why})` : ""}`,
  );
  writeFileSync(join(out, "multi-gpu.json"), JSON.stringify({ results, notRun, figures }, null, 2));
  process.exitCode = failed.length > 0 ? 1 : 0;
}

if (process.argv[2] === "--serve") await serveChecks(process.argv.slice(3));
else await main();
