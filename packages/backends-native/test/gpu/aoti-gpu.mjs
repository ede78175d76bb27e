// torch_aoti on a GPU (issue 49 item 4): AOTInductor packages compiled on that machine for CUDA
// (FP16, BF16, FP32), run through the torch addon and through a Galley server (gRPC, tensors in
// CUDA shared memory), against the same exported program run in Python; then the speed of the
// package, TorchScript and eager Python for the text-to-video denoiser and a DiT-sized block stack
// (width 1152, 16 heads, 1,024 tokens) at batch 1 and 8; and the device-kind checks (a CPU package
// on a KIND_GPU instance, a CUDA package on a KIND_CPU one). prepare-carry.sh bundles this file
// (server and client inside) into build/gpu-carry; device-run.sh's `aoti` step runs it:
//
//   node packages/backends-native/build/gpu-carry/aoti-gpu.mjs --out=/tmp/galley-aoti
//   npx tsx packages/backends-native/test/gpu/aoti-gpu.mjs --device=cpu --small   # a check, here
//
// Options: --device=cuda|cpu (cuda), --small (small models: a check of the script), --python=python3
// (torch 2.x and a C++ compiler: it exports, compiles and times), --out=DIR (packages, references,
// aoti-gpu.json; packages already there are reused, so a second call skips the compiles),
// --blocks=28 (the stack's depth), --seconds=1 (per timed point), --make-only (compile and stop).
// Prints one line per check, then the speed table; exits 1 if any check failed.
import { execFile, fork } from "node:child_process";
import { copyFileSync, existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadTorchModel, torchSupport } from "@galley/backends-native/torch";
import { CudaSharedMemory, createGrpcClient, SystemSharedMemory } from "@galley/client";
import { runLoad, runLoadWorker } from "../../../../bench/lib/grpc-load.ts";
import { createChecks, values } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const MODELS = ["small_fp16", "small_bf16", "small_cpu", "denoiser", "dit_fp16"];
const TIMED = ["denoiser", "dit_fp16"];
const BATCHES = [1, 8];
/** Relative L2 error allowed against the exported program run eagerly in Python, by datatype. */
const TOLERANCE = { FP32: 1e-3, FP16: 1e-2, BF16: 3e-2 };
const ELEMENT = { FP32: 4, FP16: 2, BF16: 2 };

/** Identical bytes, or the relative L2 error and the largest absolute difference. */
function compare(got, want, datatype) {
  const a = Buffer.from(got.buffer, got.byteOffset, got.byteLength);
  const b = Buffer.from(want.buffer, want.byteOffset, want.byteLength);
  if (a.length !== b.length)
    return { identical: false, relL2: Infinity, maxAbs: Infinity, sizes: `${a.length} vs ${b.length}` };
  if (a.equals(b)) return { identical: true, relL2: 0, maxAbs: 0 };
  const x = values(a, datatype);
  const y = values(b, datatype);
  let diff = 0;
  let norm = 0;
  let maxAbs = 0;
  for (let i = 0; i < x.length; i++) {
    const d = x[i] - y[i];
    diff += d * d;
    norm += y[i] * y[i];
    maxAbs = Math.max(maxAbs, Math.abs(d));
  }
  return { identical: false, relL2: Math.sqrt(diff / Math.max(norm, 1e-30)), maxAbs };
}
const describe = (c) =>
  c.identical ? "byte-identical" : `rel L2 ${c.relL2.toExponential(2)}, max |diff| ${c.maxAbs.toPrecision(3)}`;

function python(args, options = {}) {
  return new Promise((resolve, reject) => {
    execFile(arg("python", "python3"), args, { maxBuffer: 64 << 20, ...options }, (error, stdout, stderr) => {
      if (stderr) process.stderr.write(stderr);
      error
        ? reject(new Error(`${args.slice(0, 4).join(" ")}: ${stderr.split("\n").slice(-6).join(" | ")}`))
        : resolve(stdout);
    });
  });
}

async function medianMs(call, seconds) {
  for (let i = 0; i < 6; i++) await call();
  const samples = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end || samples.length < 10) {
    const t = performance.now();
    await call();
    samples.push(performance.now() - t);
  }
  samples.sort((p, q) => p - q);
  return samples[Math.floor(samples.length / 2)];
}

async function main() {
  const device = arg("device", "cuda");
  const small = process.argv.includes("--small");
  const seconds = Number(arg("seconds", "1"));
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-aoti-gpu-")));
  const script = fileURLToPath(new URL("aoti_models.py", import.meta.url));
  // Bundled into build/gpu-carry, this file is not beside aoti_models.py: the repository's copy.
  const models = existsSync(script)
    ? script
    : join(dirname(fileURLToPath(import.meta.url)), "..", "..", "test", "gpu", "aoti_models.py");
  mkdirSync(out, { recursive: true });
  const { results, check, attempt } = createChecks();
  const common = ["--device", device, ...(small ? ["--small"] : []), "--blocks", arg("blocks", "28")];
  const support = torchSupport();
  check(
    "addon loads with AOTInductor",
    support.available && support.aoti,
    `libtorch ${support.version}, aoti ${support.aoti}, CUDA devices ${support.cudaDevices}`,
  );

  // 1. Export and compile, all models at once (each its own Python; a package already made is kept).
  const started = performance.now();
  await Promise.all(
    MODELS.map((name) =>
      existsSync(join(out, `${name}.json`))
        ? undefined
        : attempt(`${name}: export and compile`, () =>
            // Once seen here (torch 2.13, CPU): a package that refused one-row batches from a
            // compile next to others, and not when compiled again without Inductor's caches.
            python([models, "make", out, "--model", name, ...common]).catch((error) => {
              if (!String(error.message).includes("dim value is too small")) throw error;
              console.log(`${name}: one-row batches refused; compiling again without Inductor's caches`);
              return python([models, "make", out, "--model", name, ...common], {
                env: { ...process.env, TORCHINDUCTOR_FORCE_DISABLE_CACHES: "1" },
              });
            }),
          ),
    ),
  );
  const info = Object.fromEntries(
    MODELS.filter((n) => existsSync(join(out, `${n}.json`))).map((n) => [
      n,
      JSON.parse(readFileSync(join(out, `${n}.json`), "utf8")),
    ]),
  );
  for (const [name, i] of Object.entries(info)) {
    check(
      `${name}: compiled for ${i.device}`,
      true,
      `${i.parameters} parameters, export ${i.exportSeconds} s, compile ${i.compileSeconds} s, torch ${i.torch}`,
    );
  }
  console.log(`compiles: ${((performance.now() - started) / 1000).toFixed(0)} s`);
  if (process.argv.includes("--make-only")) return finish(out, device, results, {});

  const inputsOf = (name, b) =>
    info[name].inputs.map((input, i) => ({
      datatype: input.datatype,
      shape: [b, ...input.shape],
      data: new Uint8Array(readFileSync(join(out, `${name}.b${b}.in${i}`))),
    }));
  const fileOf = (name, b, kind, i) => new Uint8Array(readFileSync(join(out, `${name}.b${b}.${kind}${i}`)));
  const gpuModels = MODELS.filter((n) => n !== "small_cpu" && info[n]);

  // 2. In-process: each package (and its TorchScript twin) through the addon, with and without
  // CUDA graphs: outputs against the exported program in Python (and the package in Python), then timed.
  const timings = {};
  for (const name of gpuModels) {
    const datatype = info[name].outputs[0].datatype;
    for (const format of ["aoti", "torchscript"]) {
      for (const graphs of device === "cuda" ? [false, true] : [false]) {
        const label = `${name} ${format}${graphs ? " + CUDA graphs" : ""}`;
        await attempt(label, async () => {
          const file = join(out, `${name}.${format === "aoti" ? "pt2" : "pt"}`);
          const model = await loadTorchModel(file, {
            format,
            device,
            deviceId: 0,
            ...(graphs ? { cudaGraphs: true } : {}),
          });
          try {
            for (const b of BATCHES) {
              const inputs = inputsOf(name, b);
              // Past the graph's 3 eager calls and its capture: the replay's outputs are checked.
              let result;
              for (let k = 0; k < (graphs ? 5 : 1); k++) result = await model.execute(inputs, { graph: graphs });
              const verdicts = result.outputs.map((o, i) => compare(o.data, fileOf(name, b, "ref", i), datatype));
              const ok = verdicts.every((c) => c.relL2 <= TOLERANCE[datatype]);
              let detail = `vs exported program: ${verdicts.map(describe).join("; ")}`;
              if (format === "aoti") {
                const same = result.outputs.map((o, i) => compare(o.data, fileOf(name, b, "aoti", i), datatype));
                detail += `; vs the package in Python: ${same.map(describe).join("; ")}`;
              }
              if (graphs)
                detail += `; graph ${result.cudaGraph ?? "none"}${result.cudaGraphError ? ` (${result.cudaGraphError})` : ""}`;
              check(
                `${label} batch ${b}: outputs within ${TOLERANCE[datatype]} (rel L2)`,
                ok && (!graphs || result.cudaGraph === "replayed"),
                detail,
              );
              if (TIMED.includes(name)) {
                const ms = await medianMs(() => model.execute(inputs, { graph: graphs }), seconds);
                timings[name] ??= {};
                timings[name][`node ${format}${graphs ? " graphs" : ""}`] ??= {};
                timings[name][`node ${format}${graphs ? " graphs" : ""}`][b] = ms;
              }
            }
          } finally {
            await model.close();
          }
        });
      }
    }
  }

  // 3. The device kind: a CPU package on a GPU instance, a CUDA package on a CPU instance.
  if (device === "cuda" && info.small_cpu && info.small_fp16) {
    const refused = async (label, file, options, text) =>
      attempt(label, async () => {
        const error = await loadTorchModel(file, { format: "aoti", deviceId: 0, ...options }).then(
          async (m) => {
            await m.close();
            return undefined;
          },
          (e) => e,
        );
        check(label, error !== undefined && error.message.includes(text), error ? error.message : "loaded");
      });
    await refused(
      "a CPU package on a GPU instance is refused",
      join(out, "small_cpu.pt2"),
      { device: "cuda" },
      "compiled for cpu, but this instance runs on a GPU (KIND_GPU)",
    );
    await refused(
      "a CUDA package on a CPU instance is refused",
      join(out, "small_fp16.pt2"),
      { device: "cpu" },
      "compiled for cuda, but this instance runs on the CPU (KIND_CPU)",
    );
  }

  // 4. Python: eager, TorchScript and the package, per model and batch (kernel and host to host).
  const pythonTimes = {};
  for (const name of TIMED.filter((n) => info[n])) {
    await attempt(`${name}: Python timings`, async () => {
      pythonTimes[name] = JSON.parse(
        await python([models, "time", out, "--model", name, ...common, "--seconds", String(seconds)]),
      );
    });
  }

  // 5. Served: Galley over gRPC, tensors in CUDA shared memory (system shared memory on a CPU).
  const served = await serve(out, device, info, inputsOf, fileOf, check, attempt, seconds);

  // The table: milliseconds per forward, batch 1 / 8.
  const rows = [];
  for (const name of TIMED.filter((n) => info[n])) {
    const py = pythonTimes[name]?.results ?? {};
    const cell = (v) => (v === undefined ? "-" : v.toFixed(2));
    const pair = (get) => BATCHES.map((b) => cell(get(b))).join(" / ");
    for (const label of ["eager", "torchscript", "aoti"]) {
      rows.push([name, `Python ${label}, device to device`, pair((b) => py[label]?.[b]?.kernel)]);
      rows.push([name, `Python ${label}, host to host`, pair((b) => py[label]?.[b]?.e2e)]);
    }
    for (const [label, byBatch] of Object.entries(timings[name] ?? {}))
      rows.push([name, `Galley in-process (${label.slice(5)}), host to host`, pair((b) => byBatch[b])]);
    for (const [label, byBatch] of Object.entries(served[name] ?? {}))
      rows.push([
        name,
        `Galley served (${label}), gRPC + ${device === "cuda" ? "CUDA" : "system"} shm, p50`,
        pair((b) => byBatch[b]),
      ]);
  }
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length), 10));
  console.log(
    `\nms per forward, batch ${BATCHES.join(" / ")} (${pythonTimes.dit_fp16?.device ?? device}, torch ${info.dit_fp16?.torch ?? "?"})`,
  );
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(widths[i])).join("  "));
  finish(out, device, results, { info, timings, pythonTimes, served, table: rows });
}

function finish(out, device, results, extra) {
  const failed = results.filter((r) => !r.ok);
  writeFileSync(join(out, "aoti-gpu.json"), JSON.stringify({ device, results, ...extra }, null, 2));
  console.log(
    `\n${results.length - failed.length} passed, ${failed.length} failed (${device}; ${join(out, "aoti-gpu.json")})`,
  );
  process.exitCode = failed.length > 0 ? 1 : 0;
}

/** A repository of the timed models (package and TorchScript, with and without graphs) and the kind checks. */
function repository(out, device, info) {
  const repo = join(out, "repository");
  const kind = device === "cuda" ? "KIND_GPU" : "KIND_CPU";
  const write = (model, file, platform, config) => {
    mkdirSync(join(repo, model, "1"), { recursive: true });
    const target = join(repo, model, "1", platform === "torch_aoti" ? "model.pt2" : "model.pt");
    if (!existsSync(target)) {
      try {
        linkSync(file, target);
      } catch {
        copyFileSync(file, target);
      }
    }
    writeFileSync(join(repo, model, "config.pbtxt"), `name: "${model}"\nplatform: "${platform}"\n${config}`);
  };
  const served = [];
  for (const name of TIMED.filter((n) => info[n])) {
    const i = info[name];
    for (const format of ["aoti", "torchscript"]) {
      const aoti = format === "aoti";
      const io =
        `max_batch_size: 8\n` +
        `input [ ${i.inputs.map((x, k) => `{ name: "${aoti ? `ARGS[${k}]` : `INPUT__${k}`}" data_type: TYPE_${x.datatype} dims: [ ${x.shape.join(", ")} ] }`).join(", ")} ]\n` +
        `output [ ${i.outputs.map((x, k) => `{ name: "${aoti ? "RESULT" : `OUTPUT__${k}`}" data_type: TYPE_${x.datatype} dims: [ ${x.shape.join(", ")} ] }`).join(", ")} ]\n` +
        `instance_group [ { kind: ${kind} count: 1 } ]\n`;
      for (const graphs of device === "cuda" ? [false, true] : [false]) {
        const model = `${name}_${aoti ? "aoti" : "ts"}${graphs ? "_graphs" : ""}`;
        write(
          model,
          join(out, `${name}.${aoti ? "pt2" : "pt"}`),
          aoti ? "torch_aoti" : "pytorch_libtorch",
          io + (graphs ? "optimization { cuda { graphs: true } }\n" : ""),
        );
        served.push({ model, name, label: `${format}${graphs ? " graphs" : ""}`, aoti });
      }
    }
  }
  if (device === "cuda" && info.small_cpu && info.small_fp16) {
    const io = `max_batch_size: 8\ninput [ { name: "ARGS[0]" data_type: TYPE_FP32 dims: [ 16, 64 ] } ]\noutput [ { name: "RESULT" data_type: TYPE_FP32 dims: [ 16, 64 ] } ]\n`;
    write(
      "cpu_package_on_gpu",
      join(out, "small_cpu.pt2"),
      "torch_aoti",
      `${io}instance_group [ { kind: KIND_GPU count: 1 } ]\n`,
    );
    write(
      "cuda_package_on_cpu",
      join(out, "small_fp16.pt2"),
      "torch_aoti",
      `${io.replaceAll("FP32", "FP16")}instance_group [ { kind: KIND_CPU count: 1 } ]\n`,
    );
  }
  return { repo, served };
}

async function serve(out, device, info, inputsOf, fileOf, check, attempt, seconds) {
  const times = {};
  const { repo, served } = repository(out, device, info);
  const child = fork(process.argv[1], ["--serve", repo], {
    stdio: ["ignore", "pipe", "pipe", "ipc"],
    execArgv: process.execArgv,
  });
  const log = [];
  child.stdout.on("data", (d) => log.push(d));
  child.stderr.on("data", (d) => log.push(d));
  try {
    const ready = await new Promise((resolve, reject) => {
      child.once("message", resolve);
      child.once("exit", (code) => reject(new Error(`the server exited with ${code}: ${Buffer.concat(log)}`)));
    });
    const url = `http://127.0.0.1:${ready.grpc}`;
    const client = createGrpcClient({ baseUrl: url });
    const index = await client.index();
    const reason = (model) => index.find((m) => m.name === model)?.reason ?? "";
    const expectedFailures = ["cpu_package_on_gpu", "cuda_package_on_cpu"].filter((m) => existsSync(join(repo, m)));
    check(
      "server: every timed model loads",
      served.every((s) => !ready.failed.includes(s.model)),
      `failed: ${
        ready.failed
          .filter((m) => !expectedFailures.includes(m))
          .map((m) => `${m} (${reason(m)})`)
          .join("; ") || "none"
      }`,
    );
    if (expectedFailures.length > 0) {
      check(
        "server: a CPU package on KIND_GPU fails its load, saying why",
        reason("cpu_package_on_gpu").includes("compiled for cpu, but this instance runs on a GPU (KIND_GPU)"),
        reason("cpu_package_on_gpu"),
      );
      check(
        "server: a CUDA package on KIND_CPU fails its load, saying why",
        reason("cuda_package_on_cpu").includes("compiled for cuda, but this instance runs on the CPU (KIND_CPU)"),
        reason("cuda_package_on_cpu"),
      );
    }
    const sharedMemory = device === "cuda" ? "cuda" : "system";
    for (const s of served.filter((x) => !ready.failed.includes(x.model))) {
      const i = info[s.name];
      const datatype = i.outputs[0].datatype;
      for (const b of BATCHES) {
        const inputs = inputsOf(s.name, b).map((x, k) => ({ name: s.aoti ? `ARGS[${k}]` : `INPUT__${k}`, ...x }));
        const outputs = i.outputs.map((o, k) => ({
          name: s.aoti ? "RESULT" : `OUTPUT__${k}`,
          byteSize: b * o.shape.reduce((p, q) => p * q, 1) * ELEMENT[o.datatype],
        }));
        await attempt(`served ${s.model} batch ${b}`, async () => {
          const m = await runLoad(
            url,
            { model: s.model, inputs, outputs },
            { concurrency: 1, threads: 1, seconds, warmMs: 500, script: process.argv[1], sharedMemory },
          );
          if (m.calls === 0) throw new Error(m.firstFailure ?? "no call finished");
          const sorted = [...m.latencies].sort((p, q) => p - q);
          times[s.name] ??= {};
          times[s.name][s.label] ??= {};
          times[s.name][s.label][b] = sorted[Math.floor(sorted.length / 2)];
          // One more request, its outputs read back from the region and checked (a graph's replay by now).
          const total = inputs.reduce((n, x) => n + x.data.byteLength, 0) + outputs.reduce((n, o) => n + o.byteSize, 0);
          const region =
            sharedMemory === "cuda"
              ? await CudaSharedMemory.create(total, { device: 0, client })
              : await SystemSharedMemory.create(total, { client });
          try {
            let at = 0;
            const request = { inputs: {}, outputs: [] };
            for (const x of inputs) {
              await region.write(at, x.data);
              request.inputs[x.name] = region.input(x.datatype, x.shape, at, x.data.byteLength);
              at += x.data.byteLength;
            }
            const places = outputs.map((o) => {
              request.outputs.push(region.output(o.name, at, o.byteSize));
              at += o.byteSize;
              return at - o.byteSize;
            });
            await client.infer(s.model, request);
            const verdicts = [];
            for (const [k, o] of outputs.entries())
              verdicts.push(compare(await region.read(places[k], o.byteSize), fileOf(s.name, b, "ref", k), datatype));
            check(
              `served ${s.model} batch ${b}: outputs within ${TOLERANCE[datatype]} (rel L2)`,
              verdicts.every((c) => c.relL2 <= TOLERANCE[datatype]),
              `${verdicts.map(describe).join("; ")}; p50 ${times[s.name][s.label][b].toFixed(3)} ms over ${m.calls} calls`,
            );
          } finally {
            await region.dispose();
          }
        });
      }
    }
  } finally {
    child.disconnect?.();
    await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once("exit", resolve)));
    writeFileSync(join(out, "server.log"), Buffer.concat(log));
  }
  return times;
}

// Last, so that every const above is initialised before main runs.
if (await runLoadWorker()) {
  // A load process of runLoad: its job is done.
} else if (process.argv[2] === "--serve") {
  const { createServer, createLogger } = await import("@galley/server");
  const server = createServer({
    modelRepositories: [process.argv[3]],
    allowClientShm: true,
    http: false,
    metrics: false,
    grpc: { host: "127.0.0.1", port: 0 },
    log: createLogger({ info: false }),
  });
  const addresses = await server.listen();
  process.send?.({ grpc: addresses.grpc?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
} else {
  await main();
}
