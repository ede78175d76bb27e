// The PyTorch backend against Python torch in-process (issue 18, item 7): an FP16 MLP (three
// 4096x4096 layers) and an ESPCN-style 4x super-resolution net (256² → 1024²), at batch 1, 8 and
// 32, served by Galley over gRPC (a server process of its own) against the same .pt run by Python
// under torch.inference_mode() from host memory to host memory.
//
//   npx tsx bench/pytorch-backend.ts [--device=cuda] [--batches=1,8,32] [--seconds=3] [--python=python3]
//   npx tsx bench/pytorch-backend.ts --device=cpu --small --seconds=1 --python=/usr/bin/python3   # a check here
//
// Two ways to serve batch B: one request carrying B rows (`request`), and B clients each sending
// one row, batched by the dynamic batcher (`batched`). Each is reported as rows per second and as
// a ratio to Python's rows per second (target: >= 0.9 at batch 8 and 32). Where nvidia-smi is
// found, the GPU's mean utilisation during each measurement is reported too.
import { type ChildProcess, execFileSync, fork, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService } from "@galley/proto";
import { median, table } from "./lib/stats.js";

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ??
  process.env[`BENCH_${name.toUpperCase()}`] ??
  fallback;

interface ModelInfo {
  input: number[];
  output: number[];
  datatype: "FP16" | "FP32";
}

if (process.argv[2] === "--serve") {
  // The server process: Galley over the repository in argv[3], its gRPC port sent to the parent.
  const { createServer, createLogger } = await import("@galley/server");
  const server = createServer({
    modelRepositories: [process.argv[3] ?? ""],
    http: false,
    metrics: false,
    grpc: { host: "127.0.0.1", port: 0 },
    log: createLogger({ info: false }),
  });
  const addresses = await server.listen();
  process.send?.({ port: addresses.grpc?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
} else {
  await main();
}

async function main(): Promise<void> {
  const device = arg("device", "cuda");
  const small = process.argv.includes("--small");
  const python = arg("python", "python3");
  const seconds = Number(arg("seconds", "3"));
  const batches = arg("batches", "1,8,32").split(",").map(Number);
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-bench-torch-")));
  const script = arg(
    "script",
    fileURLToPath(new URL("../packages/server/test/fixtures/pytorch/bench_models.py", import.meta.url)),
  );
  const dtype = device === "cpu" ? "fp32" : "fp16";

  console.log(`models in ${out} (${dtype}${small ? ", small" : ""}); Python's timings...`);
  execFileSync(python, [script, "make", out, "--dtype", dtype, ...(small ? ["--small"] : [])], { stdio: "inherit" });
  const models = JSON.parse(readFileSync(join(out, "models.json"), "utf8")) as Record<string, ModelInfo>;
  const pythonTimes = JSON.parse(
    execFileSync(
      python,
      [script, "time", out, "--device", device, "--batches", batches.join(","), "--seconds", String(seconds)],
      {
        encoding: "utf8",
      },
    ),
  ) as { torch: string; results: Record<string, Record<string, { e2e: number; kernel: number }>> };

  const repo = join(out, "repository");
  const maxBatch = Math.max(...batches);
  for (const [name, info] of Object.entries(models)) {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(join(repo, name, "1", "model.pt"), readFileSync(join(out, `${name}.pt`)));
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"
platform: "pytorch_libtorch"
max_batch_size: ${maxBatch}
input [ { name: "INPUT__0" data_type: TYPE_${info.datatype} dims: [ ${info.input.join(", ")} ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_${info.datatype} dims: [ ${info.output.join(", ")} ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { kind: ${arg("kind", device === "cpu" ? "KIND_CPU" : "KIND_GPU")} count: 1 } ]
`,
    );
  }
  const server = fork(fileURLToPath(import.meta.url), ["--serve", repo], { execArgv: process.execArgv });
  const ready = await new Promise<{ port: number; failed?: unknown }>((resolve, reject) => {
    server.once("message", (m) => resolve(m as { port: number }));
    server.once("exit", (code) => reject(new Error(`the server exited (${code})`)));
  });
  if (ready.failed && (ready.failed as unknown[]).length > 0) console.log("failed models:", ready.failed);
  const client = createClient(GRPCInferenceService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${ready.port}` }));

  const rows: string[][] = [];
  const summary: unknown[] = [];
  for (const [name, info] of Object.entries(models)) {
    for (const batch of batches) {
      const py = pythonTimes.results[name]?.[String(batch)];
      const pyRows = py ? (batch / py.e2e) * 1000 : Number.NaN;
      const call = (rowsPerRequest: number) => {
        const data = rowsOf(info, rowsPerRequest);
        return () =>
          client.modelInfer({
            modelName: name,
            inputs: [
              { name: "INPUT__0", datatype: info.datatype, shape: [BigInt(rowsPerRequest), ...info.input.map(BigInt)] },
            ],
            rawInputContents: [data],
          });
      };
      let request: Awaited<ReturnType<typeof measure>>;
      let batched: Awaited<ReturnType<typeof measure>>;
      try {
        request = await measure(call(batch), 1, seconds);
        batched = await measure(call(1), batch, seconds);
      } catch (error) {
        // The served side failed (the model did not load): Python's numbers are still reported.
        const why = (error as Error).message.split("\n")[0] ?? "";
        rows.push([
          name,
          String(batch),
          "failed",
          py?.e2e.toFixed(3) ?? "-",
          py?.kernel.toFixed(3) ?? "-",
          pyRows.toFixed(0),
          "-",
          "-",
          "-",
          "-",
        ]);
        summary.push({ model: name, batch, python: py, pythonRowsPerS: pyRows, galleyError: why });
        console.log(`${name} batch ${batch}: ${why}`);
        continue;
      }
      for (const [mode, m, rowsPerCall] of [
        ["request", request, batch],
        ["batched", batched, 1],
      ] as const) {
        const galleyRows = (m.calls * rowsPerCall) / m.seconds;
        rows.push([
          name,
          String(batch),
          mode,
          py ? py.e2e.toFixed(3) : "-",
          py ? py.kernel.toFixed(3) : "-",
          pyRows.toFixed(0),
          galleyRows.toFixed(0),
          (galleyRows / pyRows).toFixed(2),
          m.p50.toFixed(3),
          m.gpu === undefined ? "-" : `${m.gpu.toFixed(0)}%`,
        ]);
        summary.push({
          model: name,
          batch,
          mode,
          python: py,
          pythonRowsPerS: pyRows,
          galleyRowsPerS: galleyRows,
          ratio: galleyRows / pyRows,
          p50Ms: m.p50,
          gpuUtil: m.gpu,
        });
      }
    }
  }
  server.disconnect();
  await new Promise((resolve) => server.once("exit", resolve));
  console.log(`\nPython torch ${pythonTimes.torch} on ${device}; Galley gRPC, dynamic batching, one instance\n`);
  console.log(
    table(
      [
        "model",
        "batch",
        "served as",
        "py e2e ms",
        "py kernel ms",
        "py rows/s",
        "galley rows/s",
        "ratio",
        "galley p50 ms",
        "GPU util",
      ],
      rows,
    ),
  );
  writeFileSync(join(out, "pytorch-backend.json"), JSON.stringify(summary, null, 2));
  console.log(`\nresults: ${join(out, "pytorch-backend.json")}`);
}

/** `concurrency` callers calling back to back for `seconds` (after a short warm-up): calls, p50 latency, GPU utilisation. */
async function measure(
  call: () => Promise<unknown>,
  concurrency: number,
  seconds: number,
): Promise<{ calls: number; seconds: number; p50: number; gpu: number | undefined }> {
  const warm = performance.now() + Math.min(1000, seconds * 300);
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < warm) await call();
    }),
  );
  const gpu = gpuSampler();
  const latencies: number[] = [];
  let calls = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        await call();
        latencies.push(performance.now() - t);
        calls++;
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  return { calls, seconds: elapsed, p50: median(latencies), gpu: await gpu.stop() };
}

/** nvidia-smi's utilisation every 100 ms while measuring; undefined where there is none. */
function gpuSampler(): { stop(): Promise<number | undefined> } {
  let child: ChildProcess | undefined;
  const samples: number[] = [];
  try {
    child = spawn(
      "nvidia-smi",
      ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100", "-i", "0"],
      {
        stdio: ["ignore", "pipe", "ignore"],
      },
    );
    child.on("error", () => undefined);
    child.stdout?.on("data", (chunk: Buffer) => {
      for (const line of chunk.toString().split("\n")) if (line.trim() !== "") samples.push(Number(line));
    });
  } catch {
    child = undefined;
  }
  return {
    async stop() {
      child?.kill();
      return samples.length > 0 ? samples.reduce((a, b) => a + b, 0) / samples.length : undefined;
    },
  };
}

/** `rows` rows of the model's input: FP32 in [0, 1), FP16 in [0.5, 1). */
function rowsOf(info: ModelInfo, rows: number): Uint8Array {
  const count = rows * info.input.reduce((a, b) => a * b, 1);
  if (info.datatype === "FP16")
    return new Uint8Array(Uint16Array.from({ length: count }, (_, i) => 0x3800 | ((i * 37) & 0x3ff)).buffer);
  return new Uint8Array(Float32Array.from({ length: count }, (_, i) => ((i * 37) % 1000) / 1000).buffer);
}
