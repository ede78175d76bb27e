// A diffusers-style DDIM loop in model.py on a GPU machine (issue 50 item 4): a Python model
// (`ddim_loop`, KIND_GPU, FORCE_CPU_ONLY_INPUT_TENSORS "no") takes the initial noise, latents
// [B,4,16,32,32] FP16, from a CUDA shared-memory region and runs 20 DDIM steps exactly as diffusers'
// DDIMScheduler does them (scaled_linear betas 0.00085 → 0.012 over 1,000 train steps, "leading"
// spacing, steps_offset 1, set_alpha_to_one False, eta 0, epsilon prediction, no clipping): each step
// a BLS call with `preferred_memory` GPU into a TorchScript denoiser (`pytorch_libtorch`, KIND_GPU,
// 3D conv blocks with GroupNorm/SiLU and a timestep embedding, FP16, made at run time with fixed
// weights), then the scheduler arithmetic in torch on the GPU. The same loop runs in plain Python in
// one process (torch.jit.load of the same file, the same scheduler code: one text in both, the same
// noise) before the server starts. A Galley server in a child process (CUDA IPC handles do not open
// in the process that made them), this process the client. Checks, for B = 1 and B = 4:
//   1. the final latents equal the plain-Python loop's (bytes; else within a tolerance, said why);
//   2. host bytes per step (the server's host-transfer counters around one request, / 20): 0, for
//      the denoiser and for ddim_loop; the final latents' one copy to the client is apart;
//   3. step time: model.py's loop time / 20 (no synchronisation between steps, one at the end, as
//      the baseline's: the next step is queued while the GPU runs this one) and the client's time
//      per request / 20, each within 1.1× of the plain-Python loop's per-step time (medians over
//      --reps requests after --warmup);
//   4. GPU memory (nvidia-smi) flat over --requests requests (64 MiB).
// Also reported: each BLS call's time in exec() and in mapping its output in model.py, and the
// denoiser's own statistics a call (compute_infer: what libtorch took in the server), so that a step's
// overhead can be told apart from the denoiser's time.
// prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry; device-run.sh
// runs it as the step `ddim`:
//
//   node packages/backends-native/build/gpu-carry/python-ddim.mjs --out=$OUT/python-ddim
//
// Options: --out=DIR (python-ddim.json, logs), --python=python3, --gpu=0, --batches=1,4,
// --hold-cpu-latency (/dev/cpu_dma_latency held at 0 for the run: no deep C-states; needs root),
// --width=128 and --depth=8 (the denoiser: 4 → W → 2W, depth blocks at 2W, → W → 4), --graphs (the
// denoiser as CUDA graphs on both sides: optimization.cuda.graphs, torch.cuda.CUDAGraph), --warmup=3,
// --reps=10, --requests=50, --tolerance=0.01 (when the bytes differ, the max |Δ| accepted, as a
// fraction of the plain-Python result's max |x|; 0: the bytes must be equal), --device=cpu (a check
// of this script on a machine without CUDA: CPU models, B = 1, a small denoiser in FP32 inside,
// inputs as bytes; step times reported, not checked).
// Prints one line per check and a summary; exits 1 if any check failed.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaSharedMemory, createGrpcClient } from "@galley/client";
import { forkServer, serveChecks, transferDelta } from "./check-server.mjs";
import { createChecks, finishChecks, gpuMemoryMiB, gpuProcesses, values } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const STEPS = 20;
const SHAPE = [4, 16, 32, 32];

// The scheduler and the loop, one text in model.py and in the plain-Python baseline. DDIM is
// diffusers' DDIMScheduler with Stable Diffusion's config; `step` is its step() for eta 0 and
// epsilon prediction, line by line (alphas as 0-dim float32 CPU tensors, as there).
const SCHEDULER = `
import time

import numpy as np
import torch

NUM_TRAIN_TIMESTEPS = 1000
BETA_START = 0.00085
BETA_END = 0.012
STEPS_OFFSET = 1


class DDIM:
    def __init__(self, num_inference_steps):
        self.betas = torch.linspace(BETA_START**0.5, BETA_END**0.5, NUM_TRAIN_TIMESTEPS, dtype=torch.float32) ** 2
        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
        self.final_alpha_cumprod = self.alphas_cumprod[0]  # set_alpha_to_one False
        self.init_noise_sigma = 1.0
        self.num_inference_steps = num_inference_steps
        step_ratio = NUM_TRAIN_TIMESTEPS // num_inference_steps  # timestep_spacing "leading"
        timesteps = (np.arange(0, num_inference_steps) * step_ratio).round()[::-1].copy().astype(np.int64)
        timesteps += STEPS_OFFSET
        self.timesteps = torch.from_numpy(timesteps)

    def step(self, model_output, timestep, sample, eta=0.0):
        prev_timestep = timestep - NUM_TRAIN_TIMESTEPS // self.num_inference_steps
        alpha_prod_t = self.alphas_cumprod[timestep]
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod
        beta_prod_t = 1 - alpha_prod_t
        beta_prod_t_prev = 1 - alpha_prod_t_prev
        pred_original_sample = (sample - beta_prod_t ** (0.5) * model_output) / alpha_prod_t ** (0.5)
        pred_epsilon = model_output
        variance = (beta_prod_t_prev / beta_prod_t) * (1 - alpha_prod_t / alpha_prod_t_prev)
        std_dev_t = eta * variance ** (0.5)
        pred_sample_direction = (1 - alpha_prod_t_prev - std_dev_t**2) ** (0.5) * pred_epsilon
        return alpha_prod_t_prev ** (0.5) * pred_original_sample + pred_sample_direction


def ddim_loop(scheduler, latents, denoise, timesteps_on_device, sync):
    """The pipeline's loop: denoise(latents, t) then scheduler.step, as a pipeline runs it (no
    synchronisation between steps: the next step is queued while the GPU runs this one). Returns
    the latents and each step's share of the loop's time (ms, one sync() at the end)."""
    start = time.perf_counter()
    with torch.no_grad():
        latents = latents * scheduler.init_noise_sigma
        steps = scheduler.timesteps.tolist()
        for i, t in enumerate(steps):
            noise_pred = denoise(latents, timesteps_on_device[i : i + 1])
            latents = scheduler.step(noise_pred, t, latents)
    sync()
    per_step = (time.perf_counter() - start) * 1000.0 / len(steps)
    return latents, [per_step] * len(steps)
`;

// The denoiser (saved as TorchScript), the noise, and the loop in plain Python in this process.
const BASELINE = `
import json, os, statistics, sys
import torch
import torch.nn.functional as F
${SCHEDULER}

repo, out, device, width, depth, batches, warmup, reps, steps, graphs = sys.argv[1:11]
width, depth, warmup, reps, steps, graphs = int(width), int(depth), int(warmup), int(reps), int(steps), graphs == "1"
batches = [int(b) for b in batches.split(",")]
cuda = device != "cpu"
device = torch.device(device)


def groups(channels):
    return 32 if channels % 32 == 0 else channels


class Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int, temb: int):
        super().__init__()
        self.norm = torch.nn.GroupNorm(groups(cin), cin)
        self.conv = torch.nn.Conv3d(cin, cout, 3, padding=1)
        self.emb = torch.nn.Linear(temb, cout)
        self.skip = torch.nn.Conv3d(cin, cout, 1) if cin != cout else torch.nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv(F.silu(self.norm(x)))
        e = self.emb(emb)
        h = h + e.reshape(e.shape[0], e.shape[1], 1, 1, 1)
        return self.skip(x) + h


class Denoiser(torch.nn.Module):
    """4 → W → 2W, depth blocks at 2W, → W → 4 (3D convolutions), a sinusoidal timestep embedding
    through an MLP added in every block."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        temb = 4 * width
        self.freq = width
        self.time1 = torch.nn.Linear(width, temb)
        self.time2 = torch.nn.Linear(temb, temb)
        self.conv_in = torch.nn.Conv3d(4, width, 3, padding=1)
        blocks = [Block(width, 2 * width, temb)] + [Block(2 * width, 2 * width, temb) for _ in range(depth)]
        self.blocks = torch.nn.ModuleList(blocks + [Block(2 * width, width, temb)])
        self.norm_out = torch.nn.GroupNorm(groups(width), width)
        self.conv_out = torch.nn.Conv3d(width, 4, 3, padding=1)

    def forward(self, latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        dtype = self.conv_in.weight.dtype
        half = self.freq // 2
        freqs = torch.exp(
            torch.arange(half, dtype=torch.float32, device=latents.device) * (-9.210340371976184 / half)
        )
        args = timestep.to(device=latents.device, dtype=torch.float32).reshape(-1, 1) * freqs.reshape(1, -1)
        sinusoid = torch.cat([torch.cos(args), torch.sin(args)], dim=1).to(dtype)
        emb = self.time2(F.silu(self.time1(sinusoid)))
        h = self.conv_in(latents.to(dtype))
        for block in self.blocks:
            h = block(h, emb)
        return self.conv_out(F.silu(self.norm_out(h))).to(latents.dtype)


torch.manual_seed(0)
model = Denoiser(width, depth).eval()
# FP16 on the GPU; FP32 inside on a CPU (its 3D convolutions in FP16 are slow or missing), FP16 at the edges.
model = model.to(torch.float16 if cuda else torch.float32)
params = sum(p.numel() for p in model.parameters())
# Multiply-adds × 2 of the 3D convolutions for one sample (16 × 32 × 32 positions, padding keeps them).
flops = sum(
    2 * 16 * 32 * 32 * m.out_channels * m.in_channels * m.kernel_size[0] * m.kernel_size[1] * m.kernel_size[2]
    for m in model.modules()
    if isinstance(m, torch.nn.Conv3d)
)
os.makedirs(os.path.join(repo, "denoiser", "1"), exist_ok=True)
path = os.path.join(repo, "denoiser", "1", "model.pt")
torch.jit.save(torch.jit.script(model), path)

module = torch.jit.load(path, map_location=device).eval()


def eager(latents, timestep):
    # As Galley's libtorch backend runs it (INFERENCE_MODE true, no grad).
    with torch.inference_mode():
        return module(latents, timestep)


captured = {}


def graphed(latents, timestep):
    # The denoiser as a CUDA graph per batch size (--graphs), as Galley's optimization.cuda.graphs
    # runs it: inputs copied into the graph's own, the output read before the next replay.
    key = tuple(latents.shape)
    if key not in captured:
        x, t = latents.clone(), timestep.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):
                module(x, t)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.inference_mode():
            y = module(x, t)
        captured[key] = (graph, x, t, y)
    graph, x, t, y = captured[key]
    x.copy_(latents)
    t.copy_(timestep)
    graph.replay()
    return y


denoiser = graphed if graphs and cuda else eager


scheduler = DDIM(steps)
timesteps = scheduler.timesteps.to(device)
sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
result = {"params": params, "gflopPerSample": flops / 1e9, "timesteps": scheduler.timesteps.tolist(), "torch": torch.__version__, "batches": {}}


def median_ms(fn, n):
    times = []
    for _ in range(n):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


for b in batches:
    noise = torch.randn((b, 4, 16, 32, 32), generator=torch.Generator().manual_seed(1000 + b), dtype=torch.float32)
    noise = noise.to(torch.float16)
    with open(os.path.join(out, "noise_b%d.bin" % b), "wb") as f:
        f.write(noise.numpy().tobytes())
    x = noise.to(device)
    with torch.no_grad():
        for _ in range(warmup):
            denoiser(x, timesteps[0:1])
        call_ms = median_ms(lambda: denoiser(x, timesteps[0:1]), max(reps, 5))
    for _ in range(warmup):
        ddim_loop(scheduler, x, denoiser, timesteps, sync)
    first = None
    same = True
    step_times, loops = [], []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        latents, times = ddim_loop(scheduler, x, denoiser, timesteps, sync)
        loops.append((time.perf_counter() - start) * 1000.0)
        step_times += times
        final = latents.cpu()
        if first is None:
            first = final
        else:
            same = same and bool(torch.equal(first, final))
    with open(os.path.join(out, "final_b%d.bin" % b), "wb") as f:
        f.write(first.numpy().tobytes())
    result["batches"][str(b)] = {
        "denoiserCallMs": call_ms,
        "stepMs": statistics.median(step_times),
        "loopMs": statistics.median(loops),
        "repsEqual": same,
        "finite": bool(torch.isfinite(first).all()),
        "maxAbs": float(first.float().abs().max()),
    }
    print("plain Python, B=%d: denoiser call %.3f ms, step %.3f ms, loop %.1f ms" % (b, call_ms, result["batches"][str(b)]["stepMs"], result["batches"][str(b)]["loopMs"]), flush=True)


def driver_costs():
    """Microseconds (median of 200) of the driver calls a GPU tensor's trip to the server makes in
    the stub: an idle context's synchronise, an allocation's range and its IPC handle."""
    import ctypes
    cuda = ctypes.CDLL("libcuda.so.1")
    x = torch.empty(1 << 20, device=device, dtype=torch.uint8)
    sync()
    base, size, handle = ctypes.c_uint64(), ctypes.c_size_t(), (ctypes.c_byte * 64)()
    pointer = ctypes.c_uint64(x.data_ptr())
    cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer)

    def us(fn):
        times = []
        for _ in range(200):
            start = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - start)
        return statistics.median(times) / 1000.0

    return {
        "cuCtxSynchronize": us(lambda: cuda.cuCtxSynchronize()),
        "torch.cuda.synchronize": us(sync),
        "cuMemGetAddressRange": us(lambda: cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer)),
        "cuIpcGetMemHandle": us(lambda: cuda.cuIpcGetMemHandle(ctypes.byref(handle), base)),
    }


if cuda:
    result["driverUs"] = driver_costs()
    print("driver calls, µs: %s" % json.dumps(result["driverUs"]), flush=True)
print(json.dumps(result))
`;

// The loop in model.py: each step's denoiser call is a BLS request kept on the GPU.
const MODEL_PY = `
import numpy as np
import triton_python_backend_utils as pb_utils
${SCHEDULER}

STEPS = ${STEPS}


class TritonPythonModel:
    def initialize(self, args):
        self.cuda = "GPU" in args["model_instance_kind"]
        device_id = int(args["model_instance_device_id"])
        self.device = torch.device("cuda", device_id) if self.cuda else torch.device("cpu")
        if self.cuda:
            torch.cuda.set_device(self.device)
        self.memory = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, device_id)
        self.scheduler = DDIM(STEPS)
        # Every step's TIMESTEP, on the device once: a step sends a view of it (no host bytes).
        self.timesteps = self.scheduler.timesteps.to(self.device)
        self.sync = (lambda: torch.cuda.synchronize(self.device)) if self.cuda else (lambda: None)
        self.where = [1, 1]
        self.calls = []
        self.stamps = []
        self.trace = None

    def denoise(self, latents, timestep):
        # Each call's time in exec() (the server runs the denoiser and answers) and in mapping its
        # output here (the server lends it: one copy on the GPU, one IPC handle opened), ms; and
        # CLOCK_MONOTONIC stamps (the server's trace clock) before the inputs are made, before exec(),
        # after it and after the mapping, to lay a traced call beside the server's timestamps.
        made = time.monotonic_ns()
        start = time.perf_counter()
        inputs = [
            pb_utils.Tensor.from_dlpack("LATENTS__0", latents),
            pb_utils.Tensor.from_dlpack("TIMESTEP__1", timestep),
        ]
        sent = time.monotonic_ns()
        response = pb_utils.InferenceRequest(
            model_name="denoiser",
            inputs=inputs,
            requested_output_names=["NOISE_PRED__0"],
            preferred_memory=self.memory,
            trace=self.trace,
        ).exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        answered = time.perf_counter()
        back = time.monotonic_ns()
        output = pb_utils.get_output_tensor_by_name(response, "NOISE_PRED__0")
        noise_pred = torch.from_dlpack(output)
        self.calls.append([(answered - start) * 1000.0, (time.perf_counter() - answered) * 1000.0])
        self.stamps.append([made, sent, back, time.monotonic_ns()])
        self.where = [int(output.is_cpu()), int(noise_pred.is_cuda)]
        return noise_pred

    def execute(self, requests):
        responses = []
        for request in requests:
            given = pb_utils.get_input_tensor_by_name(request, "LATENTS")
            self.calls = []
            self.stamps = []
            self.trace = request.trace()
            latents, times = ddim_loop(self.scheduler, torch.from_dlpack(given), self.denoise, self.timesteps, self.sync)
            where = np.array([int(given.is_cpu())] + self.where + [int(latents.is_cuda)], dtype=np.uint8)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor.from_dlpack("LATENTS_OUT", latents),
                        pb_utils.Tensor("STEP_MS", np.array(times, dtype=np.float32)),
                        pb_utils.Tensor("WHERE", where),
                        pb_utils.Tensor("BLS_MS", np.array(self.calls, dtype=np.float32)),
                        pb_utils.Tensor("BLS_NS", np.array(self.stamps, dtype=np.int64)),
                    ]
                )
            )
        return responses
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
      if (code === 0) resolve(text.trim().split("\n"));
      else reject(new Error(`${command} exited with ${code}: ${text.slice(-2000)}`));
    });
  });
}

const tensor = (name, type, dims) => `{ name: "${name}" data_type: ${type} dims: [ ${dims.join(", ")} ] }`;
const latentDims = [-1, ...SHAPE];

function writeModels(repo, gpu, cpu, graphs) {
  const group = `instance_group [ { count: 1 kind: ${cpu ? "KIND_CPU" : `KIND_GPU gpus: [ ${gpu} ]`} } ]\n`;
  writeFileSync(
    join(repo, "denoiser", "config.pbtxt"),
    `name: "denoiser"\nplatform: "pytorch_libtorch"\nmax_batch_size: 0\n` +
      `input [ ${tensor("LATENTS__0", "TYPE_FP16", latentDims)}, ${tensor("TIMESTEP__1", "TYPE_INT64", [1])} ]\n` +
      `output [ ${tensor("NOISE_PRED__0", "TYPE_FP16", latentDims)} ]\n${group}` +
      (graphs ? "optimization { cuda { graphs: true } }\n" : ""),
  );
  mkdirSync(join(repo, "ddim_loop", "1"), { recursive: true });
  writeFileSync(join(repo, "ddim_loop", "1", "model.py"), MODEL_PY);
  writeFileSync(
    join(repo, "ddim_loop", "config.pbtxt"),
    `name: "ddim_loop"\nbackend: "python"\nmax_batch_size: 0\n` +
      `input [ ${tensor("LATENTS", "TYPE_FP16", latentDims)} ]\n` +
      `output [ ${tensor("LATENTS_OUT", "TYPE_FP16", latentDims)}, ${tensor("STEP_MS", "TYPE_FP32", [STEPS])}, ` +
      `${tensor("WHERE", "TYPE_UINT8", [4])}, ${tensor("BLS_MS", "TYPE_FP32", [STEPS, 2])}, ${tensor("BLS_NS", "TYPE_INT64", [STEPS, 4])} ]\n${group}` +
      `parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }\n`,
  );
}

/**
 * Each traced denoiser call laid beside model.py's stamps (both CLOCK_MONOTONIC): ms from the
 * stub making its inputs to sending (`inputs`), from sending to the server's REQUEST_START (`to
 * server`), the server's own spans, from REQUEST_END to exec() returning (`back`), and the output's
 * mapping (`map`); medians per batch size, printed and kept in the figures.
 */
function profile(traceFile, figures) {
  const entries = JSON.parse(readFileSync(traceFile, "utf8"));
  const traces = new Map();
  for (const e of entries) {
    const t = traces.get(e.id) ?? { stamps: {} };
    if (e.model_name) t.model = e.model_name;
    for (const s of e.timestamps ?? []) t.stamps[s.name] = Number(s.ns);
    traces.set(e.id, t);
  }
  const denoiser = [...traces.values()].filter((t) => t.model === "denoiser" && t.stamps.REQUEST_START);
  const names = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
  ];
  figures.profile = {};
  for (const [b, fig] of Object.entries(figures.batches ?? {})) {
    const rows = [];
    for (const stamps of fig.profiledStamps ?? []) {
      for (let k = 0; k + 3 < stamps.length; k += 4) {
        const [made, sent, back, mapped] = stamps.slice(k, k + 4);
        const t = denoiser.find((d) => d.stamps.REQUEST_START >= sent && d.stamps.REQUEST_START <= back);
        if (!t) continue;
        const row = { inputs: sent - made, "to server": t.stamps.REQUEST_START - sent };
        for (let i = 1; i < names.length; i++) {
          const from = t.stamps[names[i - 1]];
          const to = t.stamps[names[i]];
          if (from !== undefined && to !== undefined) row[`${names[i - 1]}→${names[i]}`] = to - from;
        }
        row.back = back - (t.stamps.REQUEST_END ?? back);
        row.map = mapped - back;
        rows.push(row);
      }
    }
    const summary = { calls: rows.length };
    for (const key of Object.keys(rows[0] ?? {}))
      summary[key] = Number((median(rows.map((r) => r[key])) / 1e6).toFixed(3));
    figures.profile[b] = summary;
    console.log(`B=${b}: a traced BLS call, ms (median of ${rows.length}): ${JSON.stringify(summary)}`);
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-python-ddim-")));
  const python = arg("python", "python3");
  const gpu = Number(arg("gpu", "0"));
  const cpu = arg("device", "cuda") === "cpu";
  const batches = arg("batches", cpu ? "1" : "1,4")
    .split(",")
    .map(Number);
  const width = Number(arg("width", cpu ? "4" : "128"));
  const depth = Number(arg("depth", cpu ? "0" : "8"));
  const warmup = Number(arg("warmup", cpu ? "1" : "3"));
  const reps = Number(arg("reps", cpu ? "2" : "10"));
  const requests = Number(arg("requests", cpu ? "2" : "50"));
  const tolerance = Number(arg("tolerance", "0.01"));
  // --graphs: the denoiser as CUDA graphs on both sides (Galley's optimization.cuda.graphs, a
  // torch.cuda.CUDAGraph per batch size in plain Python): its kernel launches off the CPU path.
  const graphs = process.argv.includes("--graphs") && !cpu;
  mkdirSync(out, { recursive: true });
  // --hold-cpu-latency: hold /dev/cpu_dma_latency at 0 µs for the whole run (baseline too), as
  // tuned's latency profiles do: no deep C-states, so a sleeping thread wakes in a few µs. Tells
  // how much of a BLS call's cost is waking threads on an idle host (needs root).
  let heldLatency = "no";
  if (process.argv.includes("--hold-cpu-latency")) {
    try {
      // Never closed: the kernel keeps the request while the descriptor is open (until exit).
      const fd = openSync("/dev/cpu_dma_latency", "w");
      writeSync(fd, Buffer.from(new Int32Array([0]).buffer));
      heldLatency = "yes (/dev/cpu_dma_latency 0 µs, held open)";
    } catch (error) {
      heldLatency = `asked, not possible: ${error.message}`;
    }
    console.log(`CPU wake-up latency held at 0: ${heldLatency}`);
  }
  const { results, check, attempt } = createChecks();
  const figures = {
    settings: {
      batches,
      width,
      depth,
      warmup,
      reps,
      requests,
      steps: STEPS,
      device: cpu ? "cpu" : "cuda",
      graphs,
      heldLatency,
    },
  };

  // The denoiser, the noise and the plain-Python loop, before the server takes the GPU.
  const repo = join(out, "models");
  mkdirSync(repo, { recursive: true });
  const script = join(out, "baseline.py");
  writeFileSync(script, BASELINE);
  const device = cpu ? "cpu" : `cuda:${gpu}`;
  const lines = await run(
    python,
    [
      script,
      repo,
      out,
      device,
      `${width}`,
      `${depth}`,
      batches.join(","),
      `${warmup}`,
      `${reps}`,
      `${STEPS}`,
      graphs ? "1" : "0",
    ],
    join(out, "baseline.log"),
  );
  for (const line of lines) if (line.startsWith("plain Python") || line.startsWith("driver calls")) console.log(line);
  const baseline = JSON.parse(lines.at(-1));
  figures.baseline = baseline;
  console.log(
    `denoiser: ${baseline.params} parameters, ${baseline.gflopPerSample.toFixed(2)} GFLOP a sample (3D convolutions), ` +
      `torch ${baseline.torch}, timesteps ${baseline.timesteps.join(" ")}`,
  );
  for (const b of batches) {
    const r = baseline.batches[b];
    check(
      `plain Python, B=${b}: the same latents on every run, finite`,
      r.repsEqual && r.finite,
      `max |x| ${r.maxAbs}`,
    );
  }

  writeModels(repo, gpu, cpu, graphs);
  // The server traces (Triton's trace file, timestamps) only the few requests the profile asks for.
  const traceFile = join(out, "trace.json");
  const server = await forkServer(repo, python, { env: { ...process.env, GALLEY_CHECK_TRACE_FILE: traceFile } });
  const { ports, transfers } = server;
  check("server starts with the models", ports.failed.length === 0, JSON.stringify(ports.failed));
  const delta = transferDelta;
  const grpc = createGrpcClient({ baseUrl: `http://127.0.0.1:${ports.grpc}` });
  /** The denoiser's cumulative statistics: [count, ns] of queue, computeInput, computeInfer, computeOutput. */
  const denoiserStats = async () => {
    const stats = (await grpc.statistics("denoiser")).modelStats[0]?.inferenceStats;
    const entry = (d) => [Number(d?.count ?? 0n), Number(d?.ns ?? 0n)];
    return {
      queue: entry(stats?.queue),
      computeInput: entry(stats?.computeInput),
      computeInfer: entry(stats?.computeInfer),
      computeOutput: entry(stats?.computeOutput),
    };
  };
  const perSample = SHAPE.reduce((a, b) => a * b, 2);
  const region = cpu
    ? undefined
    : await CudaSharedMemory.create(perSample * Math.max(...batches), { device: gpu, client: grpc });
  figures.batches = {};

  try {
    for (const b of batches) {
      await attempt(`DDIM loop in model.py, B=${b}`, async () => {
        const bytes = perSample * b;
        const noise = new Uint8Array(readFileSync(join(out, `noise_b${b}.bin`)));
        const expected = new Uint8Array(readFileSync(join(out, `final_b${b}.bin`)));
        await region?.write(0, noise);
        const shape = [b, ...SHAPE];
        const infer = () =>
          grpc.infer("ddim_loop", {
            inputs: {
              LATENTS: region ? region.input("FP16", shape, 0, bytes) : { datatype: "FP16", shape, data: noise },
            },
          });
        const base = baseline.batches[b];
        const fig = { baseline: base };
        figures.batches[b] = fig;

        // Warm-up (cuDNN, TorchScript's profiling runs and what it then optimises), then one
        // request counted and compared, then the timed ones.
        for (let i = 0; i < warmup; i++) await infer();
        const before = await transfers();
        const first = await infer();
        const after = await transfers();
        const den = delta(before, after, "denoiser");
        const loop = delta(before, after, "ddim_loop");
        const outputBytes = cpu ? 0 : bytes; // the final latents, to the host once for gRPC
        const perStep = {
          hostToDevice: (den.hostToDevice + loop.hostToDevice) / STEPS,
          deviceToHost: (den.deviceToHost + loop.deviceToHost - outputBytes) / STEPS,
          onDevice: (den.onDevice + loop.onDevice) / STEPS,
        };
        fig.transfers = { denoiser: den, ddimLoop: loop, perStep, finalOutputBytes: outputBytes };
        const w = [...first.output("WHERE").data];
        check(
          `B=${b}: input, BLS outputs, torch tensors on the GPU (is_cpu, is_cuda)`,
          w.join() === (cpu ? "1,1,0,0" : "0,0,1,1"),
          w.join(),
        );
        check(
          `B=${b}: 0 host bytes per step (denoiser and ddim_loop)`,
          perStep.hostToDevice === 0 && perStep.deviceToHost === 0,
          `per step ${JSON.stringify(perStep)}; one request: denoiser ${JSON.stringify(den)}, ddim_loop ${JSON.stringify(loop)}`,
        );
        check(
          `B=${b}: the final latents come to the host once (${outputBytes} bytes for gRPC)`,
          loop.deviceToHost === outputBytes && den.deviceToHost === 0,
          JSON.stringify(loop),
        );

        const got = first.output("LATENTS_OUT").data;
        const bitEqual =
          got.length === expected.length && Buffer.compare(Buffer.from(got), Buffer.from(expected)) === 0;
        // The same ops on the same libtorch: equal bytes expected. A difference can only come from
        // another kernel or another reduction order in the server's process (a cuDNN algorithm, a
        // TorchScript fusion); a mistake (a stale or racing buffer, a wrong timestep) moves the
        // latents by their own size, so the tolerance is a small fraction of that.
        let maxDiff = 0;
        const refMax = base.maxAbs;
        if (!bitEqual && got.length === expected.length) {
          const x = values(got, "FP16");
          const y = values(expected, "FP16");
          for (let i = 0; i < x.length; i++) maxDiff = Math.max(maxDiff, Math.abs(x[i] - y[i]));
        }
        fig.output = { bitEqual, maxAbsDiff: bitEqual ? 0 : maxDiff, referenceMaxAbs: refMax };
        check(
          `B=${b}: final latents equal the plain-Python loop's`,
          bitEqual || (got.length === expected.length && maxDiff <= tolerance * refMax),
          bitEqual
            ? `${got.length} bytes, bit-equal`
            : `NOT bit-equal: max |Δ| ${maxDiff} (accepted up to ${tolerance} × max |x| ${refMax}: another kernel or reduction order in the server's libtorch)`,
        );

        const statsBefore = await denoiserStats();
        const wall = [];
        const inside = [];
        const loops = [];
        const execs = [];
        const maps = [];
        let allEqual = true;
        for (let i = 0; i < reps; i++) {
          const t0 = performance.now();
          const r = await infer();
          wall.push(performance.now() - t0);
          const steps = [...r.output("STEP_MS").fp32()];
          inside.push(...steps);
          loops.push(steps.reduce((a, x) => a + x, 0));
          const calls = r.output("BLS_MS").fp32();
          for (let k = 0; k < calls.length; k += 2) {
            execs.push(calls[k]);
            maps.push(calls[k + 1]);
          }
          allEqual &&= Buffer.compare(Buffer.from(r.output("LATENTS_OUT").data), Buffer.from(got)) === 0;
        }
        check(`B=${b}: every timed request returns the same latents`, allEqual);
        // The denoiser's own statistics over the timed calls (ms a call): what the server's libtorch
        // took, apart from getting the call there and the answer back.
        const statsAfter = await denoiserStats();
        const perCall = {};
        for (const [key, [count, ns]] of Object.entries(statsAfter)) {
          const calls = count - statsBefore[key][0];
          perCall[key] = calls > 0 ? (ns - statsBefore[key][1]) / calls / 1e6 : null;
        }
        const requestStep = median(wall) / STEPS;
        const insideStep = median(inside);
        // What a request costs beyond model.py's loop: gRPC, the input's loan, the output's copy.
        const outside = median(wall) - median(loops);
        fig.server = {
          requestMs: median(wall),
          requestStepMs: requestStep,
          modelPyStepMs: insideStep,
          modelPyLoopMs: median(loops),
          outsideLoopMs: outside,
          blsExecMs: median(execs),
          blsOutputMapMs: median(maps),
          denoiserStatsMs: perCall,
          requestsMs: wall,
        };
        const ratioInside = insideStep / base.stepMs;
        const ratioRequest = requestStep / (base.loopMs / STEPS);
        fig.ratios = { modelPyStep: ratioInside, requestStep: ratioRequest };
        const line =
          `B=${b}: plain Python ${base.stepMs.toFixed(3)} ms/step (denoiser call ${base.denoiserCallMs.toFixed(3)} ms), ` +
          `model.py ${insideStep.toFixed(3)} ms/step (${ratioInside.toFixed(3)}×), ` +
          `request / ${STEPS} ${requestStep.toFixed(3)} ms (${ratioRequest.toFixed(3)}× the plain loop / ${STEPS}, ${(base.loopMs / STEPS).toFixed(3)} ms; ` +
          `${outside.toFixed(2)} ms of a request outside model.py's loop)`;
        console.log(line);
        console.log(
          `B=${b}: a BLS call in model.py: ${median(execs).toFixed(3)} ms in exec() (the denoiser alone: ` +
            `${base.denoiserCallMs.toFixed(3)} ms in plain Python), ${median(maps).toFixed(3)} ms mapping its output; ` +
            `the denoiser's statistics, ms a call: ${JSON.stringify(perCall, (_, v) => (typeof v === "number" ? Number(v.toFixed(3)) : v))}`,
        );
        // Profile: a few requests traced with their BLS calls (the calls pass `trace=request.trace()`),
        // laid beside model.py's own stamps after the server stops (its trace file is complete then).
        // The server's verbose log says, for each denoiser call, libtorch's own time against the
        // wall time on the JS side (the rest: the hops to libtorch's thread and back).
        await grpc.traceSettings({ trace_level: ["TIMESTAMPS"], trace_rate: "1", trace_count: "-1" });
        const logFrom = Buffer.concat(server.logs).length;
        fig.profiledStamps = [];
        for (let i = 0; i < 3; i++) {
          const r = await infer();
          fig.profiledStamps.push([...r.output("BLS_NS").int64()].map(Number));
        }
        await grpc.traceSettings({ trace_level: ["OFF"] });
        const split = [
          ...Buffer.concat(server.logs)
            .subarray(logFrom)
            .toString()
            .matchAll(/denoiser_\d+_\d+: .*libtorch (\d+) µs of (\d+) µs/g),
        ];
        if (split.length > 0) {
          const libtorch = median(split.map((m) => Number(m[1]))) / 1e3;
          const wallMs = median(split.map((m) => Number(m[2]))) / 1e3;
          fig.libtorchSplit = { calls: split.length, libtorchMs: libtorch, wallMs, hopsMs: wallMs - libtorch };
          console.log(
            `B=${b}: the denoiser's compute (median of ${split.length}): libtorch ${libtorch.toFixed(3)} ms of ${wallMs.toFixed(3)} ms ` +
              `from handing it over to its result on the JS thread (${(wallMs - libtorch).toFixed(3)} ms in the hops)`,
          );
        }
        if (!cpu) {
          check(`B=${b}: model.py's step within 1.1× of plain Python's`, ratioInside <= 1.1, line);
          check(`B=${b}: a request / ${STEPS} within 1.1× of plain Python's step`, ratioRequest <= 1.1, line);
        }
      });
    }

    await attempt("GPU memory over many requests", async () => {
      const b = batches[0];
      const shape = [b, ...SHAPE];
      const bytes = perSample * b;
      const noise = new Uint8Array(readFileSync(join(out, `noise_b${b}.bin`)));
      await region?.write(0, noise);
      const infer = () =>
        grpc.infer("ddim_loop", {
          inputs: {
            LATENTS: region ? region.input("FP16", shape, 0, bytes) : { datatype: "FP16", shape, data: noise },
          },
        });
      const start = gpuMemoryMiB(gpu);
      const curve = [];
      for (let i = 1; i <= requests; i++) {
        await infer();
        if (i % Math.max(1, Math.floor(requests / 5)) === 0) curve.push([i, gpuMemoryMiB(gpu)]);
      }
      const end = gpuMemoryMiB(gpu);
      figures.memory = { batch: b, startMiB: start, endMiB: end, curve, processes: gpuProcesses() };
      console.log(`GPU memory per process (MiB): ${JSON.stringify(figures.memory.processes)}`);
      if (!cpu)
        check(
          `GPU memory flat over ${requests} requests of B=${b} (${requests * STEPS} BLS calls)`,
          end - start <= 64,
          `${start} → ${end} MiB; curve ${JSON.stringify(curve)}`,
        );
    });
  } finally {
    await region?.dispose().catch(() => {});
    await server.stop(join(out, "server.log"));
  }
  await attempt("where a BLS call's time goes (traced calls)", () => profile(traceFile, figures));
  finishChecks(out, "python-ddim", results, figures);
}

if (process.argv[2] === "--serve") await serveChecks(process.argv.slice(3));
else await main();
