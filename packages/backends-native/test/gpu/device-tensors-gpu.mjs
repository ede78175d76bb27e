// Tensors on the GPU end to end (issue 19, items 1, 3, 5, 6): a Galley server in a child process
// (CUDA IPC handles do not open in the process that made them) with libtorch models made here by
// python3's torch, and this process as the client. Checks and times:
//   1. CUDA shared memory in place: an FP16 input in a CUDA region read by a libtorch model on
//      that GPU with no host copy, its output written device to device into a CUDA region; bytes
//      equal to Python's; the server's host↔device counters for the model at 0.
//   2. A three-step GPU ensemble (upscale ×2 → 3×3 filter → downscale ×2 on 1024² FP16 frames)
//      with the tensors handed over on the device vs the same steps through host memory
//      (DEVICE_HANDOFF false): outputs equal, host bytes between the GPU steps 0, throughput ratio
//      with the frames over gRPC, and again with each frame in a CUDA region in and out (0 host
//      bytes in the whole request; target ≥ 2×); the same steps as BLS calls from a scripted and
//      a Python model asking for their outputs on GPU 0: outputs equal, host bytes between 0.
//   3. A 256 MiB FP16 input to an identity-like libtorch model (x + 1) via CUDA shared memory vs
//      system shared memory vs raw gRPC, end to end (target: CUDA ≥ 10× raw gRPC).
// prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry; device-run.sh
// runs it:
//
//   node packages/backends-native/build/gpu-carry/device-tensors-gpu.mjs --out=$OUT/device-tensors
//
// Options: --out=DIR (device-tensors-gpu.json, logs), --python=python3, --gpu=0, --seconds=8 (per
// throughput run), --big=268435456 (bytes of section 3; 0 skips it), --device=cpu (the same on a
// CPU machine without CUDA sections: a check of this script). Prints one line per check, then a
// summary table; exits 1 if any check failed.
import { fork, spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CudaSharedMemory, createGrpcClient, SystemSharedMemory } from "@galley/client";
import { createChecks } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;

// The models, made by python3's torch; the expected outputs of fixed inputs, computed there too.
const MAKE_MODELS = String.raw`
import json, os, sys
import torch
import torch.nn.functional as F
out, device, size = sys.argv[1], sys.argv[2], int(sys.argv[3])

# FP16 on the GPU; through FP32 on a CPU, whose kernels lack FP16 (the script's CPU check).
class Upscale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x if x.is_cuda else x.float()
        return F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False).to(x.dtype)

class Filter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        k = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16.0
        self.weight = torch.nn.Parameter(k.expand(3, 1, 3, 3).clone().half(), requires_grad=False)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            return F.conv2d(x, self.weight, padding=1, groups=3)
        return F.conv2d(x.float(), self.weight.float(), padding=1, groups=3).to(x.dtype)

class Downscale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x if x.is_cuda else x.float()
        return F.avg_pool2d(y, 2).to(x.dtype)

class PlusOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1

dev = torch.device(device)
models = {"upscale": Upscale(), "filter": Filter(), "downscale": Downscale(), "plus_one": PlusOne()}
for name, module in models.items():
    os.makedirs(os.path.join(out, name, "1"), exist_ok=True)
    torch.jit.save(torch.jit.script(module.eval()), os.path.join(out, name, "1", "model.pt"))
g = torch.Generator().manual_seed(7)
frame = torch.rand((1, 3, size, size), generator=g).half()
small = (torch.rand((1 << 20,), generator=g) * 100).half()
with torch.inference_mode():
    m = {k: v.to(dev) for k, v in models.items()}
    piped = m["downscale"](m["filter"](m["upscale"](frame.to(dev)))).cpu()
    plus = m["plus_one"](small.to(dev)).cpu()
frame.numpy().tofile(os.path.join(out, "frame.bin"))
piped.numpy().tofile(os.path.join(out, "frame.expected.bin"))
small.numpy().tofile(os.path.join(out, "small.bin"))
plus.numpy().tofile(os.path.join(out, "small.expected.bin"))
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda}))
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

function config(name, kind, gpu, io, extra = "") {
  const group = kind === "cuda" ? `KIND_GPU gpus: [ ${gpu} ]` : "KIND_CPU";
  return `name: "${name}"\nplatform: "pytorch_libtorch"\n${io}instance_group [ { count: 1 kind: ${group} } ]\n${extra}`;
}

const fp16 = (name, dims) => `{ name: "${name}" data_type: TYPE_FP16 dims: [ ${dims.join(", ")} ] }`;

function ensemble(name, size, handoff) {
  const step = (model, input, output) =>
    `  { model_name: "${model}" model_version: -1 input_map { key: "INPUT__0" value: "${input}" } output_map { key: "OUTPUT__0" value: "${output}" } }`;
  return (
    `name: "${name}"\nplatform: "ensemble"\nmax_batch_size: 8\n` +
    `input [ ${fp16("FRAME", [3, size, size])} ]\noutput [ ${fp16("RESULT", [3, size, size])} ]\n` +
    `ensemble_scheduling { step [\n${step("upscale", "FRAME", "big")},\n${step("filter", "big", "smooth")},\n${step("downscale", "smooth", "RESULT")}\n] }\n` +
    (handoff ? "" : `parameters { key: "DEVICE_HANDOFF" value: { string_value: "false" } }\n`)
  );
}

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-device-tensors-")));
  const python = arg("python", "python3");
  const kind = arg("device", "cuda");
  const gpu = Number(arg("gpu", "0"));
  const seconds = Number(arg("seconds", "8"));
  const big = Number(arg("big", String(256 * 1024 * 1024)));
  const size = Number(arg("size", "1024"));
  mkdirSync(out, { recursive: true });
  const { results, check, attempt } = createChecks();
  const figures = {};

  const repo = join(out, "models");
  mkdirSync(repo, { recursive: true });
  // TorchScript reads the modules' source: the script is a file, not `-c`.
  const script = join(out, "make_models.py");
  writeFileSync(script, MAKE_MODELS);
  const made = JSON.parse(
    await run(python, [script, repo, kind === "cuda" ? `cuda:${gpu}` : "cpu", String(size)], join(out, "python.log")),
  );
  console.log(`models made with torch ${made.torch} (CUDA ${made.cuda})`);
  const h = size * 2;
  const batching = `max_batch_size: 8\ndynamic_batching { }\n`;
  writeFileSync(
    join(repo, "upscale", "config.pbtxt"),
    config(
      "upscale",
      kind,
      gpu,
      `${batching}input [ ${fp16("INPUT__0", [3, size, size])} ]\noutput [ ${fp16("OUTPUT__0", [3, h, h])} ]\n`,
    ),
  );
  writeFileSync(
    join(repo, "filter", "config.pbtxt"),
    config(
      "filter",
      kind,
      gpu,
      `${batching}input [ ${fp16("INPUT__0", [3, h, h])} ]\noutput [ ${fp16("OUTPUT__0", [3, h, h])} ]\n`,
    ),
  );
  writeFileSync(
    join(repo, "downscale", "config.pbtxt"),
    config(
      "downscale",
      kind,
      gpu,
      `${batching}input [ ${fp16("INPUT__0", [3, h, h])} ]\noutput [ ${fp16("OUTPUT__0", [3, size, size])} ]\n`,
    ),
  );
  writeFileSync(
    join(repo, "plus_one", "config.pbtxt"),
    config(
      "plus_one",
      kind,
      gpu,
      `max_batch_size: 0\ninput [ ${fp16("INPUT__0", [-1])} ]\noutput [ ${fp16("OUTPUT__0", [-1])} ]\n`,
    ),
  );
  // The same three steps as BLS calls from a scripted and a Python model that ask for their
  // outputs on GPU 0 (packages/server/test/fixtures/bls-device).
  // Two folders up from test/gpu/ and from build/gpu-carry/ (the bundle) alike.
  const chainSource = fileURLToPath(new URL("../../../server/test/fixtures/bls-device/", import.meta.url));
  for (const [name, backend] of [
    ["chain_js", "js"],
    ["chain_py", "python"],
  ]) {
    cpSync(join(chainSource, name), join(repo, name), { recursive: true });
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"\nbackend: "${backend}"\nmax_batch_size: 0\n` +
        `input [ ${fp16("INPUT__0", [1, 3, size, size])} ]\n` +
        `output [ ${fp16("OUTPUT__0", [1, 3, size, size])}, { name: "WHERE" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n` +
        `parameters { key: "STEPS" value: { string_value: "upscale,filter,downscale" } }\n`,
    );
  }
  for (const [name, handoff] of [
    ["pipeline_device", true],
    ["pipeline_host", false],
  ]) {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(join(repo, name, "config.pbtxt"), ensemble(name, size, handoff));
  }

  const child = fork(process.argv[1], ["--serve", repo, python], { stdio: ["ignore", "pipe", "pipe", "ipc"] });
  const logs = [];
  child.stdout.on("data", (d) => logs.push(d));
  child.stderr.on("data", (d) => logs.push(d));
  const ports = await new Promise((resolve, reject) => {
    child.once("message", resolve);
    child.once("exit", (code) => reject(new Error(`the server exited with ${code}: ${Buffer.concat(logs)}`)));
  });
  check("server starts with the models", ports.failed.length === 0, JSON.stringify(ports.failed));
  // The server's host↔device counters (hostTransfers), read over the IPC channel.
  const transfers = () =>
    new Promise((resolve) => {
      child.once("message", resolve);
      child.send("transfers");
    });
  const delta = (before, after, model) => {
    const a = after.models[model] ?? { hostToDevice: 0, deviceToHost: 0, onDevice: 0 };
    const b = before.models[model] ?? { hostToDevice: 0, deviceToHost: 0, onDevice: 0 };
    return {
      hostToDevice: a.hostToDevice - b.hostToDevice,
      deviceToHost: a.deviceToHost - b.deviceToHost,
      onDevice: a.onDevice - b.onDevice,
    };
  };
  // The three steps' counters between two readings, and the bytes that crossed the host between
  // the steps: what upscale sends out, filter moves either way, downscale takes in.
  const stepBytes = (before, after) => {
    const counts = Object.fromEntries(["upscale", "filter", "downscale"].map((s) => [s, delta(before, after, s)]));
    const between =
      counts.upscale.deviceToHost +
      counts.filter.hostToDevice +
      counts.filter.deviceToHost +
      counts.downscale.hostToDevice;
    return { counts, between };
  };
  const grpc = createGrpcClient({ baseUrl: `http://127.0.0.1:${ports.grpc}` });
  const same = (a, b) => a.byteLength === b.byteLength && Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
  const maxDiff = (a, b) => {
    const x = new Uint16Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
    const y = new Uint16Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    const f = (bits) => {
      const s = bits & 0x8000 ? -1 : 1;
      const e = (bits >> 10) & 0x1f;
      const m = bits & 0x3ff;
      return e === 0 ? s * m * 2 ** -24 : e === 31 ? Number.NaN : s * (1 + m / 1024) * 2 ** (e - 15);
    };
    let d = 0;
    for (let i = 0; i < x.length; i++) d = Math.max(d, Math.abs(f(x[i]) - f(y[i])));
    return d;
  };

  // Each variant's output bytes, by name (the ensembles' and the BLS chains' are compared).
  const outputs = {};
  try {
    // 1. CUDA shared memory in place.
    if (kind === "cuda") {
      await attempt("CUDA shm in place (plus_one)", async () => {
        const input = readFileSync(join(repo, "small.bin"));
        const expected = readFileSync(join(repo, "small.expected.bin"));
        const bytes = input.byteLength;
        const region = await CudaSharedMemory.create(2 * bytes, { device: gpu, client: grpc });
        try {
          await region.write(0, input);
          const before = await transfers();
          await grpc.infer("plus_one", {
            inputs: { INPUT__0: region.input("FP16", [bytes / 2], 0, bytes) },
            outputs: [region.output("OUTPUT__0", bytes, bytes)],
          });
          const counts = delta(before, await transfers(), "plus_one");
          const output = await region.read(bytes, bytes);
          check("CUDA shm: output bytes equal Python's", same(output, expected), `${bytes} bytes`);
          check(
            "CUDA shm: no host copy in the server (in place in, device to device out)",
            counts.hostToDevice === 0 && counts.deviceToHost === 0 && counts.onDevice === 2 * bytes,
            JSON.stringify(counts),
          );
          figures.cudaShmInPlace = counts;
        } finally {
          await region.dispose();
        }
      });
    }

    // 2. The ensemble, device hand-off vs host round trips.
    await attempt("ensemble", async () => {
      const frame = readFileSync(join(repo, "frame.bin"));
      const expected = readFileSync(join(repo, "frame.expected.bin"));
      const input = { FRAME: { datatype: "FP16", shape: [1, 3, size, size], data: new Uint8Array(frame) } };
      const steps = ["upscale", "filter", "downscale"];
      for (const name of ["pipeline_device", "pipeline_host"]) {
        const before = await transfers();
        const result = await grpc.infer(name, { inputs: input });
        const after = await transfers();
        outputs[name] = result.output("RESULT").data;
        const { counts, between } = stepBytes(before, after);
        figures[`${name}Bytes`] = { ...counts, between };
        if (kind === "cuda") {
          if (name === "pipeline_device")
            check(
              "ensemble: host bytes between GPU steps = 0 with device hand-off",
              between === 0,
              JSON.stringify(counts),
            );
          else check("ensemble: host round trips move bytes between steps (baseline)", between > 0, `${between} bytes`);
        } else {
          check(
            `ensemble (${name}) on CPU: no host↔device bytes`,
            Object.values(counts).every((c) => c.hostToDevice === 0 && c.deviceToHost === 0),
            JSON.stringify(counts),
          );
        }
      }
      const d = maxDiff(outputs.pipeline_device, expected);
      check(
        "ensemble: device hand-off output equals the host round trips'",
        same(outputs.pipeline_device, outputs.pipeline_host),
      );
      check(
        "ensemble: output close to Python's",
        d <= 1e-2,
        `max |diff| ${d}, byte-equal ${same(outputs.pipeline_device, expected)}`,
      );

      const throughput = async (name) => {
        const end = Date.now() + seconds * 1000;
        let done = 0;
        const worker = async () => {
          while (Date.now() < end) {
            await grpc.infer(name, { inputs: input });
            done++;
          }
        };
        const start = performance.now();
        await Promise.all(Array.from({ length: 8 }, worker));
        return (done * 1000) / (performance.now() - start);
      };
      await throughput("pipeline_device"); // warm-up of both paths' kernels and allocator
      const host = await throughput("pipeline_host");
      const device = await throughput("pipeline_device");
      figures.ensemble = { framesPerSecondDevice: device, framesPerSecondHost: host, ratio: device / host };
      if (kind !== "cuda") return;

      // The same two ensembles with each frame in a CUDA region of the client, in and out (as a
      // video service keeps its frames on the GPU): the ensemble's input is read in place by its
      // first step and its output written device to device by the core, so what differs between
      // the two is only the hand-off between the steps. This is the figure the target is about;
      // the one above adds a 6 MiB frame over gRPC each way to both.
      const frameBytes = frame.byteLength;
      const regions = [];
      try {
        for (let i = 0; i < 8; i++) {
          const region = await CudaSharedMemory.create(2 * frameBytes, { device: gpu, client: grpc });
          regions.push(region);
          await region.write(0, frame);
        }
        const inRegion = (region) => ({
          inputs: { FRAME: region.input("FP16", [1, 3, size, size], 0, frameBytes) },
          outputs: [region.output("RESULT", frameBytes, frameBytes)],
        });
        for (const name of ["pipeline_device", "pipeline_host"]) {
          const region = regions[0];
          await region.write(frameBytes, new Uint8Array(frameBytes));
          const before = await transfers();
          await grpc.infer(name, inRegion(region));
          const after = await transfers();
          const written = await region.read(frameBytes, frameBytes);
          check(
            `ensemble in CUDA regions (${name}): output equals the bytes path's`,
            same(written, outputs.pipeline_device),
          );
          const counts = steps.map((s) => delta(before, after, s));
          const hostBytes = counts.reduce((a, c) => a + c.hostToDevice + c.deviceToHost, 0);
          figures[`${name}RegionBytes`] = hostBytes;
          if (name === "pipeline_device")
            check(
              "ensemble in CUDA regions: 0 host bytes in the whole request",
              hostBytes === 0,
              JSON.stringify(counts),
            );
          else
            check(
              "ensemble in CUDA regions, host round trips: bytes cross the host",
              hostBytes > 0,
              `${hostBytes} bytes`,
            );
        }
        const throughputRegions = async (name) => {
          const end = Date.now() + seconds * 1000;
          let done = 0;
          const worker = async (region) => {
            while (Date.now() < end) {
              await grpc.infer(name, inRegion(region));
              done++;
            }
          };
          const start = performance.now();
          await Promise.all(regions.map(worker));
          return (done * 1000) / (performance.now() - start);
        };
        await throughputRegions("pipeline_device");
        const hostRegions = await throughputRegions("pipeline_host");
        const deviceRegions = await throughputRegions("pipeline_device");
        figures.ensembleRegions = {
          framesPerSecondDevice: deviceRegions,
          framesPerSecondHost: hostRegions,
          ratio: deviceRegions / hostRegions,
        };
        check(
          "ensemble: device hand-off ≥ 2× host round trips (frames in CUDA regions)",
          deviceRegions / hostRegions >= 2,
          `${deviceRegions.toFixed(1)} vs ${hostRegions.toFixed(1)} frames/s (${(deviceRegions / hostRegions).toFixed(2)}×); ` +
            `frames over gRPC: ${device.toFixed(1)} vs ${host.toFixed(1)} (${(device / host).toFixed(2)}×)`,
        );
      } finally {
        for (const region of regions) await region.dispose();
      }
    });

    // 2b. The steps as BLS calls from a scripted and a Python model, outputs asked on GPU 0.
    await attempt("BLS chains", async () => {
      const frame = readFileSync(join(repo, "frame.bin"));
      for (const name of ["chain_js", "chain_py"]) {
        const before = await transfers();
        const result = await grpc.infer(name, {
          inputs: { INPUT__0: { datatype: "FP16", shape: [1, 3, size, size], data: new Uint8Array(frame) } },
        });
        const after = await transfers();
        const { counts, between } = stepBytes(before, after);
        const where = new TextDecoder().decode(result.output("WHERE").data);
        figures[`${name}Bytes`] = { ...counts, between, where };
        check(
          `BLS ${name}: output equals the ensemble's`,
          same(result.output("OUTPUT__0").data, outputs.pipeline_device),
        );
        if (kind === "cuda") {
          check(`BLS ${name}: every call's output held on the GPU`, where === "gpu", where);
          check(`BLS ${name}: host bytes between GPU steps = 0`, between === 0, JSON.stringify(counts));
        } else check(`BLS ${name} on CPU: host tensors`, where === "cpu", where);
      }
    });

    // 3. 256 MiB FP16 to plus_one: CUDA shm vs system shm vs raw gRPC.
    if (big > 0) {
      await attempt("256 MiB", async () => {
        const n = big / 2;
        const data = new Uint8Array(big);
        for (let i = 0; i < big; i += 4096) data[i] = i & 0xff;
        const times = async (label, call, rounds = 5) => {
          await call();
          const ms = [];
          for (let r = 0; r < rounds; r++) {
            const t = performance.now();
            await call();
            ms.push(performance.now() - t);
          }
          ms.sort((a, b) => a - b);
          figures[label] = { medianMs: ms[Math.floor(ms.length / 2)], minMs: ms[0] };
          return figures[label].medianMs;
        };
        const raw = await times(
          "grpcRaw",
          () => grpc.infer("plus_one", { inputs: { INPUT__0: { datatype: "FP16", shape: [n], data } } }),
          3,
        );
        const system = await SystemSharedMemory.create(2 * big, { client: grpc });
        let sys;
        try {
          await system.write(0, data);
          sys = await times("systemShm", () =>
            grpc.infer("plus_one", {
              inputs: { INPUT__0: system.input("FP16", [n], 0, big) },
              outputs: [system.output("OUTPUT__0", big, big)],
            }),
          );
        } finally {
          await system.dispose();
        }
        let cuda = Number.NaN;
        if (kind === "cuda") {
          const region = await CudaSharedMemory.create(2 * big, { device: gpu, client: grpc });
          try {
            await region.write(0, data);
            cuda = await times("cudaShm", () =>
              grpc.infer("plus_one", {
                inputs: { INPUT__0: region.input("FP16", [n], 0, big) },
                outputs: [region.output("OUTPUT__0", big, big)],
              }),
            );
          } finally {
            await region.dispose();
          }
          check(
            "256 MiB: CUDA shm ≥ 10× raw gRPC end to end",
            raw / cuda >= 10,
            `${cuda.toFixed(2)} ms vs ${raw.toFixed(1)} ms (${(raw / cuda).toFixed(1)}×)`,
          );
        }
        figures.big = {
          bytes: big,
          cudaShmMs: cuda,
          systemShmMs: sys,
          grpcRawMs: raw,
          cudaVsGrpc: raw / cuda,
          systemVsGrpc: raw / sys,
        };
      });
    }
  } finally {
    child.disconnect();
    await new Promise((resolve) => child.once("exit", resolve));
    writeFileSync(join(out, "server.log"), Buffer.concat(logs));
  }

  const row = (a, b, c) => console.log(`${a.padEnd(46)} ${String(b).padStart(14)} ${String(c).padStart(14)}`);
  console.log("\nsummary");
  const rate = (title, f, what) => {
    if (!f) return;
    row(title, f.framesPerSecondDevice.toFixed(1), `host ${f.framesPerSecondHost.toFixed(1)}`);
    row(`  ratio device / host (${what})`, f.ratio.toFixed(2), "");
  };
  if (figures.ensemble) {
    rate("ensemble 3 steps, frames/s (8 in flight)", figures.ensemble, "frames over gRPC");
    rate("ensemble, frames in CUDA regions, frames/s", figures.ensembleRegions, "target ≥ 2");
    row(
      "  host bytes between steps (device / host)",
      figures.pipeline_deviceBytes?.between,
      figures.pipeline_hostBytes?.between,
    );
  }
  if (figures.big) {
    row(`${figures.big.bytes / 2 ** 20} MiB plus_one, median ms: CUDA shm`, figures.big.cudaShmMs.toFixed(2), "");
    row("  system shm / raw gRPC", figures.big.systemShmMs.toFixed(1), figures.big.grpcRawMs.toFixed(1));
    row("  raw gRPC / CUDA shm (target ≥ 10)", figures.big.cudaVsGrpc.toFixed(1), "");
  }
  const failed = results.filter((r) => !r.ok);
  console.log(`${results.length - failed.length}/${results.length} checks passed`);
  writeFileSync(join(out, "device-tensors-gpu.json"), JSON.stringify({ torch: made, results, figures }, null, 2));
  process.exitCode = failed.length > 0 ? 1 : 0;
}

if (process.argv[2] === "--serve") {
  // The server process: Galley over the repository in argv[3]; ports sent to the parent, and its
  // host↔device counters whenever the parent asks.
  const { createServer, createLogger, hostTransfers } = await import("@galley/server");
  const server = createServer({
    modelRepositories: [process.argv[3]],
    pythonExecutable: process.argv[4] ?? "python3",
    allowClientShm: true,
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ verboseLevel: 0 }),
  });
  const addresses = await server.listen();
  process.on("message", (m) => {
    if (m === "transfers") process.send?.(hostTransfers.snapshot());
  });
  process.send?.({ grpc: addresses.grpc?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
} else {
  await main();
}
