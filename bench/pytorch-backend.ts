// The PyTorch backend against Python torch in-process (issue 18, item 7): an FP16 MLP (three
// 4096x4096 layers) and an ESPCN-style 4x super-resolution net (256² → 1024²), at batch 1, 8 and
// 32, served by Galley over gRPC (a server process of its own) against the same .pt run by Python
// under torch.inference_mode() from host memory to host memory.
//
//   npx tsx bench/pytorch-backend.ts [--device=cuda] [--batches=1,8,32] [--seconds=3] [--python=python3]
//   npx tsx bench/pytorch-backend.ts --device=cpu --small --seconds=1 --python=/usr/bin/python3   # a check here
//
// Each request carries B rows. `--concurrency` (1,4,16,64) requests are kept in flight by load
// worker threads (bench/lib/grpc-load.ts; for ESPCN's 6 MiB-a-row responses, no more than about
// 1.5 GiB in flight) and the dynamic batcher merges them. Reported per point: rows per second and
// its ratio to Python's rows per second at the same B (target: the best concurrency's >= 0.9 at
// B = 8 and 32), p50 latency, the server process's CPU (percent of one core, and microseconds per
// request) and, where nvidia-smi is found, the GPU's mean utilisation. `--instances` (2) per GPU,
// `--delay-us` (100) of queue delay, `--threads` (4) load processes; `--profile` also prints where
// the server's main thread spent its time (a --cpu-prof of the whole run); `--parameters=K=V,...`
// sets Triton's PyTorch backend parameters (e.g. DISABLE_OPTIMIZED_EXECUTION=true) on both models;
// `--models=mlp` measures only those (mlp, espcn); `--shared-memory=system|cuda` puts each caller's
// tensors in a region of its own that the requests name (perf_analyzer's `--shared-memory`), so the
// gRPC messages carry no tensor bytes (the default, `none`, sends them in the messages).
import { type ChildProcess, execFileSync, fork, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGrpcClient } from "@galley/client";
import { type LoadRequest, type LoadSharedMemory, runLoad, runLoadWorker } from "./lib/grpc-load.js";
import { median, percentile, table } from "./lib/stats.js";

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ??
  process.env[`BENCH_${name.toUpperCase()}`] ??
  fallback;

interface ModelInfo {
  input: number[];
  output: number[];
  datatype: "FP16" | "FP32";
}

if (await runLoadWorker()) {
  // A load worker thread: its job is done.
} else if (process.argv[2] === "--serve") {
  // The server process: Galley over the repository in argv[3], its gRPC port sent to the parent.
  const { createServer, createLogger } = await import("@galley/server");
  const server = createServer({
    modelRepositories: [process.argv[3] ?? ""],
    http: false,
    metrics: false,
    grpc: { host: "127.0.0.1", port: 0 },
    allowClientShm: true,
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
  const concurrencies = arg("concurrency", "1,4,16,64").split(",").map(Number);
  const instances = Number(arg("instances", "2"));
  const delayUs = Number(arg("delay-us", "100"));
  const sharedMemory = arg("shared-memory", "none") as LoadSharedMemory;
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
      { encoding: "utf8" },
    ),
  ) as { torch: string; results: Record<string, Record<string, { e2e: number; kernel: number }>> };

  // `--parameters=NAME=value,...`: Triton's PyTorch backend parameters for both models.
  const parameters = arg("parameters", "")
    .split(",")
    .filter((p) => p.includes("="))
    .map((p) => `parameters { key: "${p.split("=")[0]}" value: { string_value: "${p.split("=")[1]}" } }`)
    .join("\n");
  const repo = join(out, "repository");
  const maxBatch = Math.max(...batches);
  for (const [name, info] of Object.entries(models)) {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(join(repo, name, "1", "model.pt"), readFileSync(join(out, `${name}.pt`)));
    // Room to merge several requests of the largest batch (ESPCN's outputs are 6 MiB a row at full size).
    const mergeUpTo = name === "espcn" && !small ? maxBatch * 2 : maxBatch * 4;
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"
platform: "pytorch_libtorch"
max_batch_size: ${mergeUpTo}
input [ { name: "INPUT__0" data_type: TYPE_${info.datatype} dims: [ ${info.input.join(", ")} ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_${info.datatype} dims: [ ${info.output.join(", ")} ] } ]
dynamic_batching { max_queue_delay_microseconds: ${delayUs} }
${parameters}
instance_group [ { kind: ${arg("kind", device === "cpu" ? "KIND_CPU" : "KIND_GPU")} count: ${instances} } ]
`,
    );
  }
  const profileDir = process.argv.includes("--profile") ? join(out, "server-profile") : undefined;
  const server = fork(fileURLToPath(import.meta.url), ["--serve", repo], {
    execArgv: [...process.execArgv, ...(profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [])],
  });
  const ready = await new Promise<{ port: number; failed?: unknown }>((resolve, reject) => {
    server.once("message", (m) => resolve(m as { port: number }));
    server.once("exit", (code) => reject(new Error(`the server exited (${code})`)));
  });
  if (ready.failed && (ready.failed as unknown[]).length > 0) console.log("failed models:", ready.failed);
  const url = `http://127.0.0.1:${ready.port}`;
  const self = fileURLToPath(import.meta.url);
  const threads = Number(arg("threads", "4"));
  // Where a request's time goes inside the server: the statistics API, before and after each point.
  const stats = createGrpcClient({ baseUrl: url });
  const counters = async (model: string) => {
    const s = (await stats.statistics(model)).modelStats[0];
    const i = s?.inferenceStats;
    return {
      requests: Number(i?.success?.count ?? 0),
      executions: Number(s?.executionCount ?? 0),
      queueNs: Number(i?.queue?.ns ?? 0),
      computeNs:
        Number(i?.computeInput?.ns ?? 0) + Number(i?.computeInfer?.ns ?? 0) + Number(i?.computeOutput?.ns ?? 0),
    };
  };

  const rows: string[][] = [];
  const summary: unknown[] = [];
  const only = arg("models", "mlp,espcn").split(",");
  for (const [name, info] of Object.entries(models).filter(([name]) => only.includes(name))) {
    for (const batch of batches) {
      const py = pythonTimes.results[name]?.[String(batch)];
      const pyRows = py ? (batch / py.e2e) * 1000 : Number.NaN;
      const rowBytes = info.output.reduce((a, b) => a * b, 1) * (info.datatype === "FP16" ? 2 : 4);
      const request: LoadRequest = {
        model: name,
        inputs: [
          { name: "INPUT__0", datatype: info.datatype, shape: [batch, ...info.input], data: rowsOf(info, batch) },
        ],
        outputs: [{ name: "OUTPUT__0", byteSize: batch * rowBytes }],
      };
      // ESPCN's responses are 6 MiB a row: what is in flight stays within about 1.5 GiB.
      const limit = name === "espcn" && !small ? Math.max(2, Math.floor(1536 / (6 * batch))) : Number.POSITIVE_INFINITY;
      const points = concurrencies.filter((c, i) => c <= limit || i === 0);
      for (const concurrency of points) {
        const gpu = gpuSampler();
        const cpu = processCpu(server.pid);
        const threadsBefore = threadCpu(server.pid);
        const statsBefore = await counters(name);
        const m = await runLoad(url, request, {
          concurrency,
          threads,
          seconds,
          warmMs: Math.min(1000, seconds * 300),
          script: self,
          sharedMemory,
        });
        const cpuSeconds = processCpu(server.pid) - cpu;
        const byThread = threadCpuSince(threadsBefore, threadCpu(server.pid), m.calls);
        const util = await gpu.stop();
        const statsAfter = await counters(name);
        const served = Math.max(1, statsAfter.requests - statsBefore.requests);
        const inside = {
          requestsPerExecution: served / Math.max(1, statsAfter.executions - statsBefore.executions),
          queueMsPerRequest: (statsAfter.queueNs - statsBefore.queueNs) / served / 1e6,
          computeMsPerRequest: (statsAfter.computeNs - statsBefore.computeNs) / served / 1e6,
        };
        if (m.calls === 0) {
          const why = m.firstFailure ?? "no call finished";
          rows.push([
            name,
            String(batch),
            String(concurrency),
            py?.e2e.toFixed(3) ?? "-",
            pyRows.toFixed(0),
            "failed",
            "-",
            "-",
            "-",
            "-",
            "-",
          ]);
          summary.push({ model: name, batch, concurrency, python: py, pythonRowsPerS: pyRows, galleyError: why });
          console.log(`${name} batch ${batch} c=${concurrency}: ${why}`);
          continue;
        }
        const galleyRows = (m.calls * batch) / m.seconds;
        const point = {
          model: name,
          batch,
          concurrency,
          python: py,
          pythonRowsPerS: pyRows,
          galleyRowsPerS: galleyRows,
          ratio: galleyRows / pyRows,
          p50Ms: median(m.latencies),
          p95Ms: percentile(m.latencies, 95),
          serverCpuPercent: (100 * cpuSeconds) / m.seconds,
          serverCpuUsPerRequest: (1e6 * cpuSeconds) / m.calls,
          serverCpuUsPerRequestByThread: byThread,
          failures: m.failures,
          gpuUtil: util,
          inside,
        };
        summary.push(point);
        rows.push([
          name,
          String(batch),
          String(concurrency),
          py ? py.e2e.toFixed(3) : "-",
          pyRows.toFixed(0),
          galleyRows.toFixed(0),
          point.ratio.toFixed(2),
          point.p50Ms.toFixed(3),
          `${point.serverCpuPercent.toFixed(0)}%`,
          point.serverCpuUsPerRequest.toFixed(0),
          util === undefined ? "-" : `${util.toFixed(0)}%`,
        ]);
        console.log(rows[rows.length - 1]?.join("  "), JSON.stringify(byThread), JSON.stringify(inside));
      }
    }
  }
  server.disconnect();
  await new Promise((resolve) => server.once("exit", resolve));
  console.log(
    `\nPython torch ${pythonTimes.torch} on ${device}; Galley gRPC${sharedMemory === "none" ? "" : ` with ${sharedMemory} shared memory`}, dynamic batching (${delayUs} µs), ${instances} instance(s), ${threads} load threads\n`,
  );
  console.log(
    table(
      [
        "model",
        "batch",
        "in flight",
        "py e2e ms",
        "py rows/s",
        "galley rows/s",
        "ratio",
        "p50 ms",
        "server CPU",
        "CPU µs/req",
        "GPU util",
      ],
      rows,
    ),
  );
  if (profileDir) console.log(`\nserver main thread, self time:\n${topFunctions(profileDir)}`);
  writeFileSync(join(out, "pytorch-backend.json"), JSON.stringify(summary, null, 2));
  console.log(`\nresults: ${join(out, "pytorch-backend.json")}`);
}

/** The 25 functions with the most self time in the main thread's CPU profile in `dir`. */
function topFunctions(dir: string): string {
  const main = readdirSync(dir).find((f) => /\.0\.\d+\.cpuprofile$/.test(f));
  if (!main) return "(no profile)";
  const profile = JSON.parse(readFileSync(join(dir, main), "utf8")) as {
    nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
    samples: number[];
    timeDeltas: number[];
  };
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const frame = nodes.get(id)?.callFrame;
    const key = `${frame?.functionName || "(anonymous)"} ${frame?.url.split("/").slice(-2).join("/")}:${frame?.lineNumber}`;
    self.set(key, (self.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  return [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 25)
    .map(([key, us]) => `${(us / 1000).toFixed(0).padStart(8)} ms  ${key}`)
    .join("\n");
}

/** CPU seconds so far of each of a process's threads, summed by thread name (from /proc). */
function threadCpu(pid: number | undefined): Map<string, number> {
  const byName = new Map<string, number>();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")).replace(/[0-9]+$/, "");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      byName.set(name, (byName.get(name) ?? 0) + (Number(fields[11]) + Number(fields[12])) / 100);
    }
  } catch {
    // A thread that ended while being read: the others still count.
  }
  return byName;
}

/** Microseconds of CPU per request by thread name between two {@link threadCpu} readings (names over 2%). */
function threadCpuSince(
  before: Map<string, number>,
  after: Map<string, number>,
  calls: number,
): Record<string, number> {
  const total = [...after].reduce((a, [name, s]) => a + s - (before.get(name) ?? 0), 0);
  const out: Record<string, number> = {};
  for (const [name, seconds] of after) {
    const used = seconds - (before.get(name) ?? 0);
    if (used > 0.02 * total) out[name] = Math.round((1e6 * used) / Math.max(1, calls));
  }
  return out;
}

/** A process's user + system CPU time so far, seconds (from /proc; 0 where there is none). */
function processCpu(pid: number | undefined): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** nvidia-smi's utilisation every 100 ms while measuring; undefined where there is none. */
function gpuSampler(): { stop(): Promise<number | undefined> } {
  let child: ChildProcess | undefined;
  const samples: number[] = [];
  try {
    child = spawn(
      "nvidia-smi",
      ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100", "-i", "0"],
      { stdio: ["ignore", "pipe", "ignore"] },
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
