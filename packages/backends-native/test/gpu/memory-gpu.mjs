// Memory-aware serving on a GPU (issue 52): the GPU side of the memory accounting, the GPU memory
// budget and GPU-memory admission, against a real libtorch on CUDA and NVML. A Galley server runs in
// a child process per part (so each starts with the GPU empty); this process is the client.
//   (a) three TorchScript models, each --gib GiB of FP16 weights (made here with the machine's
//       torch), under --model-memory-budget gpu0:<2.5 models' worth> with --load-on-demand: served
//       in turn twice (a, b, c, a, b, c); every answer right, evictions counted from /metrics, each
//       version's GPU figure (statistics' memory_usage GPU 0, galley_model_memory_bytes) at least
//       its weights, the repository index showing the evicted one.
//   (b) a TorchScript model whose working memory per sample is an eighth of the GPU's free memory
//       (dynamic batching up to 16, a model_warmup of batch 1), sent 16 concurrent requests twice:
//       by a server without admission (a batch of 16 wants twice the GPU: libtorch's out-of-memory
//       error comes back for the batch, counted, and the instance still answers the next request),
//       then by one with --gpu-memory-admission (0 failures required, every answer right).
//   (c) the same model under the sequence batcher: 16 concurrent sequences (START and END in one
//       request each), for each strategy without admission (failures expected) and with it (0
//       failures required, every answer right): `oldest` on one instance, batches of 16 that want
//       twice the GPU; `direct` on two instances of 8 positions, whose full batches fit one at a
//       time.
//   (d) a Python model on the GPU (torch in its stub) whose batches take 64 MiB a request on the
//       GPU, with warm-up samples of batch 1 and 4: its GPU working memory per batch size from
//       NVML's figure for its stub (galley_model_working_memory_bytes{kind="gpu"}).
// prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry; device-run.sh
// runs it as the step `memory`:
//
//   node packages/backends-native/build/gpu-carry/memory-gpu.mjs --out=$OUT/memory-gpu
//
// Options: --out=DIR (memory-gpu.json, server logs), --python=python3, --gib=2 (weights per model in
// part a), --parts=abcd (the parts to run), --device=cpu (a check of this script on a machine
// without CUDA: part a with KIND_CPU and a host budget, 512 MiB models; parts b, c and d are left
// out). Prints one line per check and a summary; exits 1 if any check failed.
import { execFileSync, fork } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createGrpcClient, tensor } from "@galley/client";
import { createChecks, finishChecks, gpuMemoryMiB } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const GIB = 2 ** 30;
const MIB = 2 ** 20;

// argv: path, offset, weight elements (FP16), device. forward(x) = x + offset, the weights touched.
const MAKE_WEIGHTS_MODEL = `
import sys, torch
path, offset, elements, device = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

class Weights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.zeros(elements, dtype=torch.float16, device=device))
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.offset + self.w[0].float()

torch.jit.save(torch.jit.script(Weights()), path)
`;

// argv: path, elements per sample. forward(x [B, 1]) = x, through a [B, elements] FP32 working
// tensor and its product (8 bytes a element at the peak): amax of x repeated is x exactly.
const MAKE_HUNGRY_MODEL = `
import sys, torch
path, elements = sys.argv[1], int(sys.argv[2])

class Hungry(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.elements = elements

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        work = torch.ones(x.shape[0], self.elements, device=x.device, dtype=torch.float32) * x
        return work.amax(dim=1, keepdim=True)

torch.jit.save(torch.jit.script(Hungry()), path)
`;

function weightsConfig(name, kind) {
  return `name: "${name}"
platform: "pytorch_libtorch"
max_batch_size: 0
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: ${kind} } ]
`;
}

function hungrySequenceConfig(strategy, instances, maxBatchSize) {
  return `name: "hungry_seq"
platform: "pytorch_libtorch"
max_batch_size: ${maxBatchSize}
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: ${instances} kind: KIND_GPU gpus: [ 0 ] } ]
sequence_batching { ${strategy} }
model_warmup [ { name: "one" batch_size: 1 inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]
`;
}

// A Python model whose batches take 64 MiB a request on the GPU (torch in the stub).
const PY_GPU_CONFIG = `name: "py_gpu"
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]
model_warmup [
  { name: "one" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } },
  { name: "four" batch_size: 4 inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } }
]
`;
const PY_GPU_MODEL = `import torch
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.weights = torch.ones(1024, device="cuda")

    def execute(self, requests):
        work = torch.ones(len(requests) * 16 * 1024 * 1024, device="cuda")
        torch.cuda.synchronize()
        scale = float(work[0].item()) * float(self.weights[0].item())
        del work
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * scale)]) for r in requests]
`;

function hungryConfig() {
  return `name: "hungry"
platform: "pytorch_libtorch"
max_batch_size: 16
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]
dynamic_batching { max_queue_delay_microseconds: 200000 }
model_warmup [ { name: "one" batch_size: 1 inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]
`;
}

/** Fork this script as a server with `options` (JSON); resolves with its ports, logs and stop(). */
async function startServer(options, logFile) {
  const child = fork(process.argv[1], ["--serve", JSON.stringify(options)], {
    stdio: ["ignore", "pipe", "pipe", "ipc"],
  });
  const logs = [];
  child.stdout.on("data", (d) => logs.push(d));
  child.stderr.on("data", (d) => logs.push(d));
  const ports = await new Promise((resolve, reject) => {
    child.once("message", resolve);
    child.once("exit", (code) => reject(new Error(`the server exited with ${code}: ${Buffer.concat(logs)}`)));
  });
  if (ports.failed?.length) {
    // Every part needs its models: a load failure is the part's failure, with the server's words.
    const text = Buffer.concat(logs).toString();
    child.disconnect();
    writeFileSync(logFile, text);
    const lines = text.split("\n").filter((l) => /^E\d|failed|error/i.test(l));
    throw new Error(`models failed to load: ${ports.failed.join(", ")}: ${lines.slice(-6).join(" | ")}`);
  }
  return {
    ports,
    logs: () => Buffer.concat(logs).toString(),
    async stop() {
      child.disconnect();
      await new Promise((resolve) => child.once("exit", resolve));
      writeFileSync(logFile, Buffer.concat(logs));
    },
  };
}

async function serve(json) {
  const options = JSON.parse(json);
  const { createServer, createLogger } = await import("@galley/server");
  const budget = options.budget
    ? {
        ...(options.budget.host ? { host: options.budget.host } : {}),
        ...(options.budget.gpu0 ? { gpus: new Map([[0, options.budget.gpu0]]) } : {}),
      }
    : undefined;
  const server = createServer({
    modelRepositories: [options.repository],
    controlMode: "explicit",
    ...(options.python ? { pythonExecutable: options.python } : {}),
    ...(options.loadModels ? { loadModels: options.loadModels } : {}),
    ...(budget ? { loadOnDemand: true, modelMemoryBudget: budget, modelMinResidencySecs: 0 } : {}),
    ...(options.admission ? { gpuMemoryAdmission: { reserveBytes: options.admission.reserve, waitSecs: 30 } } : {}),
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: { host: "127.0.0.1", port: 0 },
    log: createLogger({ verboseLevel: 1 }),
  });
  const addresses = await server.listen();
  process.send?.({ grpc: addresses.grpc?.port, metrics: addresses.metrics?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
}

/** The value of one sample of `family` whose labels include `labels`; undefined when absent. */
function sample(text, family, labels) {
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${family}{`) && !line.startsWith(`${family} `)) continue;
    const inside = /\{(.*)\}/.exec(line)?.[1] ?? "";
    const have = Object.fromEntries([...inside.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(line.split(" ").at(-1));
  }
  return undefined;
}

const mib = (bytes) => Math.round((bytes / MIB) * 10) / 10;

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-memory-gpu-")));
  const python = arg("python", "python3");
  const cpu = arg("device", "cuda") === "cpu";
  const gib = Number(arg("gib", "2"));
  const parts = arg("parts", "abcd");
  mkdirSync(out, { recursive: true });
  // torch.jit.script reads the classes' source: the generators run from files.
  const makeWeights = join(out, "make_weights.py");
  const makeHungry = join(out, "make_hungry.py");
  writeFileSync(makeWeights, MAKE_WEIGHTS_MODEL);
  writeFileSync(makeHungry, MAKE_HUNGRY_MODEL);
  const { results, check, attempt } = createChecks();
  const figures = { device: cpu ? "cpu" : "cuda" };
  const started = performance.now();

  if (parts.includes("a")) {
    // (a) three models that together exceed the budget, served in turn.
    // On the CPU a first load also maps libtorch (~110 MiB): large weights keep that small beside them.
    const weightBytes = cpu ? 512 * MIB : gib * GIB;
    const repoA = join(out, "models-a");
    const names = ["big_a", "big_b", "big_c"];
    const offsets = [100, 200, 300];
    for (const [i, name] of names.entries()) {
      mkdirSync(join(repoA, name, "1"), { recursive: true });
      writeFileSync(join(repoA, name, "config.pbtxt"), weightsConfig(name, cpu ? "KIND_CPU" : "KIND_GPU gpus: [ 0 ]"));
      execFileSync(python, [
        makeWeights,
        join(repoA, name, "1", "model.pt"),
        String(offsets[i]),
        String(weightBytes / 2),
        cpu ? "cpu" : "cuda",
      ]);
    }
    figures.generateSecs = Math.round((performance.now() - started) / 100) / 10;
    // Two models (the first load's figure holds the CUDA context, ~0.5 GiB, too) fit; three do not.
    const budget = Math.round(2.75 * weightBytes);
    figures.a = { weightMiB: mib(weightBytes), budgetMiB: mib(budget) };
    await attempt("three models over the budget", async () => {
      const server = await startServer(
        { repository: repoA, budget: cpu ? { host: budget } : { gpu0: budget } },
        join(out, "server-a.log"),
      );
      try {
        const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${server.ports.grpc}` });
        const wrong = [];
        const order = [];
        for (let round = 0; round < 2; round++) {
          for (const [i, name] of names.entries()) {
            const x = [1, 2, 3, round];
            const result = await client.infer(name, { inputs: { INPUT__0: tensor.fp32([4], x) } });
            const y = [...result.output("OUTPUT__0").fp32()];
            if (y.some((v, k) => v !== x[k] + offsets[i])) wrong.push(`${name}: ${y}`);
            order.push(name);
            if (!cpu) figures.a[`gpuUsedMiBAfter_${name}_${round}`] = gpuMemoryMiB(0);
          }
        }
        check("every answer right (a, b, c, a, b, c)", wrong.length === 0, wrong.join("; "));
        const metrics = await (await fetch(`http://127.0.0.1:${server.ports.metrics}/metrics`)).text();
        const evictions = names.map((model) => sample(metrics, "galley_model_evictions_total", { model }) ?? 0);
        figures.a.evictions = Object.fromEntries(names.map((n, i) => [n, evictions[i]]));
        // Each load past the second evicts the least recently used: a, b, c, a.
        const total = evictions.reduce((s, n) => s + n, 0);
        check("evictions counted", total === 4, `${JSON.stringify(figures.a.evictions)} (expected 4 in all)`);
        const kind = cpu ? { kind: "host" } : { kind: "gpu", device: "0" };
        const held = {};
        for (const model of names) {
          const bytes = sample(metrics, "galley_model_memory_bytes", { model, version: "1", ...kind });
          if (bytes !== undefined) held[model] = mib(bytes);
        }
        figures.a.heldMiB = held;
        const loaded = Object.values(held);
        check(
          `${cpu ? "host" : "GPU 0"} figures of the loaded versions are at least their weights`,
          loaded.length === 2 && loaded.every((m) => m >= mib(weightBytes) * 0.99),
          JSON.stringify(held),
        );
        check(
          "the loaded versions hold no more than the budget",
          loaded.reduce((s, m) => s + m, 0) <= mib(budget),
          `${loaded.reduce((s, m) => s + m, 0)} MiB of ${mib(budget)} MiB`,
        );
        const stats = await client.statistics("big_c");
        const usage = stats.modelStats[0]?.memoryUsage ?? [];
        figures.a.memoryUsage = usage.map((u) => ({ type: u.type, id: Number(u.id), mib: mib(Number(u.byteSize)) }));
        check(
          `statistics' memory_usage has ${cpu ? "CPU" : "GPU"} 0`,
          usage.some(
            (u) => u.type === (cpu ? "CPU" : "GPU") && Number(u.id) === 0 && Number(u.byteSize) >= weightBytes * 0.99,
          ),
          JSON.stringify(figures.a.memoryUsage),
        );
        const index = await client.index();
        figures.a.index = index.map((m) => `${m.name}: ${m.state}${m.reason ? ` (${m.reason})` : ""}`);
        check(
          "the index shows the evicted model",
          index.some((m) => m.name === "big_a" && m.state === "UNAVAILABLE" && m.reason.includes("evicted")),
          figures.a.index.join("; "),
        );
        const line = server
          .logs()
          .split("\n")
          .find((l) => l.includes("loaded 'big_b' version 1:"));
        figures.a.loadLine = line ?? "";
        check("the load log line has the figures", line !== undefined && (cpu || /MiB gpu0/.test(line)), line ?? "");
      } finally {
        await server.stop();
      }
    });
  }
  // (b) 16 concurrent requests at a size that runs out of GPU memory without admission.
  if (!cpu && parts.includes("b")) {
    const freeMiB = Number(
      execFileSync("nvidia-smi", ["--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", "0"], {
        encoding: "utf8",
      }).trim(),
    );
    // 8 bytes a element at the peak: an eighth of the free memory a sample, so 16 want twice the GPU.
    const perSample = Math.floor((freeMiB * MIB) / 8);
    const elements = Math.floor(perSample / 8);
    figures.b = { freeMiB, perSampleMiB: mib(perSample) };
    const repoB = join(out, "models-b");
    mkdirSync(join(repoB, "hungry", "1"), { recursive: true });
    writeFileSync(join(repoB, "hungry", "config.pbtxt"), hungryConfig());
    execFileSync(python, [makeHungry, join(repoB, "hungry", "1", "model.pt"), String(elements)]);
    const burst = async (client) => {
      const answers = await Promise.allSettled(
        Array.from({ length: 16 }, async (_, i) => {
          const result = await client.infer("hungry", { inputs: { INPUT__0: tensor.fp32([1, 1], [i + 1]) } });
          const y = result.output("OUTPUT__0").fp32()[0];
          if (y !== i + 1) throw new Error(`request ${i}: ${y}, expected ${i + 1}`);
        }),
      );
      const failures = answers.filter((a) => a.status === "rejected").map((a) => String(a.reason?.message ?? a.reason));
      return { failures: failures.length, reasons: [...new Set(failures)].slice(0, 3) };
    };
    for (const admission of [false, true]) {
      const label = admission ? "with" : "without";
      await attempt(`16 concurrent requests ${label} admission`, async () => {
        const server = await startServer(
          { repository: repoB, loadModels: ["hungry"], ...(admission ? { admission: { reserve: 512 * MIB } } : {}) },
          join(out, `server-b-${label}.log`),
        );
        try {
          const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${server.ports.grpc}` });
          const t0 = performance.now();
          const outcome = await burst(client);
          figures.b[label] = { ...outcome, ms: Math.round(performance.now() - t0) };
          console.log(`${label} admission: ${outcome.failures} of 16 failed ${JSON.stringify(outcome.reasons)}`);
          if (admission) {
            check("0 failures with admission, every answer right", outcome.failures === 0, JSON.stringify(outcome));
            const metrics = await (await fetch(`http://127.0.0.1:${server.ports.metrics}/metrics`)).text();
            figures.b.batchLines = server
              .logs()
              .split("\n")
              .filter((l) => l.includes("model 'hungry': batch of size"))
              .slice(0, 8);
            figures.b.memoryMetric = sample(metrics, "galley_model_memory_bytes", { model: "hungry", kind: "gpu" });
            const working = sample(metrics, "galley_model_working_memory_bytes", {
              model: "hungry",
              batch_size: "1",
              kind: "gpu",
            });
            figures.b.workingMiBBatch1 = working === undefined ? undefined : mib(working);
            // The warm-up's batch of 1: its working tensor and the product, 8 bytes a element.
            check(
              "working memory per batch size measured (warm-up, batch 1)",
              working !== undefined && working >= perSample * 0.9 && working <= perSample * 1.1,
              `${figures.b.workingMiBBatch1} MiB, expected about ${mib(perSample)} MiB`,
            );
          } else {
            check(
              "without admission the burst runs out of GPU memory (the size is right for the test)",
              outcome.failures > 0,
              `${outcome.failures} of 16 failed`,
            );
            // The out-of-memory error came back for its batch: the instance still answers.
            const after = await client.infer("hungry", { inputs: { INPUT__0: tensor.fp32([1, 1], [7]) } });
            check("the instance answers after the out-of-memory batch", after.output("OUTPUT__0").fp32()[0] === 7);
          }
        } finally {
          await server.stop();
        }
      });
    }
  }
  // (c) the sequence batcher, (d) a Python stub's GPU working memory.
  if (!cpu) await sequencesAndStubs({ out, python, makeHungry, figures, check, attempt, parts });
  figures.totalSecs = Math.round((performance.now() - started) / 100) / 10;
  console.log(JSON.stringify(figures));
  finishChecks(out, "memory-gpu", results, figures);
}

async function sequencesAndStubs({ out, python, makeHungry, figures, check, attempt, parts }) {
  const freeMiB = Number(
    execFileSync("nvidia-smi", ["--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", "0"], {
      encoding: "utf8",
    }).trim(),
  );
  figures.c = { freeMiB };
  // oldest: one instance; a batch of 16 wants twice the GPU (an eighth of it a sample), the
  // admission sends smaller ones. direct: a sequence keeps its position, so the batch of a sequence
  // at position 7 is 8 requests whatever runs: two instances of 8 positions, a full batch two
  // thirds of the GPU (a twelfth a sample), and the two at once want more than the GPU.
  const oldest = "oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 200000 }";
  const direct = "direct { max_queue_delay_microseconds: 200000 minimum_slot_utilization: 1.0 }";
  const runs = [
    ["oldest", false, oldest, 1, 16, 8],
    ["oldest", true, oldest, 1, 16, 8],
    ["direct", false, direct, 2, 8, 12],
    ["direct", true, direct, 2, 8, 12],
  ];
  for (const [strategy, admission, text, instances, maxBatchSize, share] of parts.includes("c") ? runs : []) {
    const perSample = Math.floor((freeMiB * MIB) / share);
    const label = `${strategy} ${admission ? "with" : "without"} admission`;
    await attempt(`16 concurrent sequences, ${label}`, async () => {
      const repo = join(out, `models-c-${strategy}-${admission}`);
      mkdirSync(join(repo, "hungry_seq", "1"), { recursive: true });
      writeFileSync(join(repo, "hungry_seq", "config.pbtxt"), hungrySequenceConfig(text, instances, maxBatchSize));
      execFileSync(python, [makeHungry, join(repo, "hungry_seq", "1", "model.pt"), String(Math.floor(perSample / 8))]);
      const server = await startServer(
        { repository: repo, loadModels: ["hungry_seq"], ...(admission ? { admission: { reserve: 512 * MIB } } : {}) },
        join(out, `server-c-${strategy}-${admission}.log`),
      );
      try {
        const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${server.ports.grpc}` });
        const t0 = performance.now();
        const answers = await Promise.allSettled(
          Array.from({ length: 16 }, async (_, i) => {
            const result = await client.infer("hungry_seq", {
              inputs: { INPUT__0: tensor.fp32([1, 1], [i + 1]) },
              sequence: { id: 1000 + i, start: true, end: true },
            });
            const y = result.output("OUTPUT__0").fp32()[0];
            if (y !== i + 1) throw new Error(`sequence ${i}: ${y}, expected ${i + 1}`);
          }),
        );
        const failures = answers
          .filter((a) => a.status === "rejected")
          .map((a) => String(a.reason?.message ?? a.reason));
        const metrics = await (await fetch(`http://127.0.0.1:${server.ports.metrics}/metrics`)).text();
        const counted = Object.fromEntries(
          ["delayed", "reduced", "refused"].map((outcome) => [
            outcome,
            sample(metrics, "galley_model_memory_admission_batches_total", { model: "hungry_seq", outcome }),
          ]),
        );
        figures.c[label] = {
          failures: failures.length,
          reasons: [...new Set(failures)].slice(0, 3),
          ms: Math.round(performance.now() - t0),
          counted,
          batchLines: server
            .logs()
            .split("\n")
            .filter((l) => l.includes("sequence batch of size"))
            .slice(0, 8),
        };
        console.log(`${label}: ${failures.length} of 16 failed ${JSON.stringify(figures.c[label].reasons)}`);
        if (admission) {
          check(`${label}: 0 failures, every answer right`, failures.length === 0, JSON.stringify(figures.c[label]));
          check(
            `${label}: batches held back are counted`,
            (counted.reduced ?? 0) + (counted.delayed ?? 0) > 0 && counted.refused === 0,
            JSON.stringify(counted),
          );
        } else {
          check(
            `${label}: without admission the GPU runs out of memory`,
            failures.length > 0,
            `${failures.length} of 16`,
          );
        }
      } finally {
        await server.stop();
      }
    });
  }

  if (!parts.includes("d")) return;
  await attempt("a Python stub's GPU working memory per warm-up batch size", async () => {
    const repo = join(out, "models-d");
    mkdirSync(join(repo, "py_gpu", "1"), { recursive: true });
    writeFileSync(join(repo, "py_gpu", "config.pbtxt"), PY_GPU_CONFIG);
    writeFileSync(join(repo, "py_gpu", "1", "model.py"), PY_GPU_MODEL);
    const server = await startServer({ repository: repo, loadModels: ["py_gpu"], python }, join(out, "server-d.log"));
    try {
      const client = createGrpcClient({ baseUrl: `http://127.0.0.1:${server.ports.grpc}` });
      const result = await client.infer("py_gpu", { inputs: { IN: tensor.fp32([1, 1], [3]) } });
      check("the Python model answers", result.output("OUT").fp32()[0] === 3);
      const metrics = await (await fetch(`http://127.0.0.1:${server.ports.metrics}/metrics`)).text();
      const gpu = (batch) =>
        sample(metrics, "galley_model_working_memory_bytes", {
          model: "py_gpu",
          batch_size: String(batch),
          kind: "gpu",
        });
      const host = (batch) =>
        sample(metrics, "galley_model_working_memory_bytes", {
          model: "py_gpu",
          batch_size: String(batch),
          kind: "host",
        });
      figures.d = {
        gpuMiB: { 1: mib(gpu(1) ?? 0), 4: mib(gpu(4) ?? 0) },
        hostMiB: { 1: mib(host(1) ?? 0), 4: mib(host(4) ?? 0) },
        loadLine: server
          .logs()
          .split("\n")
          .find((l) => l.includes("loaded 'py_gpu' version 1:")),
      };
      // 64 MiB a request; the stub's allocator rounds up and keeps what it took (an upper bound).
      check(
        "batch 1: about 64 MiB on the GPU",
        gpu(1) !== undefined && gpu(1) >= 60 * MIB && gpu(1) <= 200 * MIB,
        JSON.stringify(figures.d),
      );
      check(
        "batch 4: about 256 MiB on the GPU",
        gpu(4) !== undefined && gpu(4) >= 240 * MIB && gpu(4) <= 450 * MIB,
        JSON.stringify(figures.d),
      );
    } finally {
      await server.stop();
    }
  });
}

if (process.argv[2] === "--serve") await serve(process.argv[3]);
else await main();
