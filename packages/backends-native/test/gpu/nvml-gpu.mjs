// GPU metrics on a GPU (issue 19, item 4): plain JavaScript over dist/, so it runs on a machine
// with Node and the built package but no node_modules. Run from packages/backends-native:
//
//   node test/gpu/nvml-gpu.mjs --build --out=DIR
//
// 1. reads every GPU through the addon (sampleGpus: NVML loaded at run time) and checks names,
//    uuids and ranges; 2. compares them with nvidia-smi; 3. runs a torch matmul loop in a python3
//    child for --load-secs (default 8) and checks that utilisation, power and energy move; 4. if the
//    server bundle prepare-carry.sh makes (build/gpu-carry/galley-server.mjs) is there, starts a real
//    server, scrapes /metrics and checks the nv_gpu_* lines, their gpu_uuid labels and that
//    nv_energy_consumption grows under load.
//
// Options: --build (compile build/Release/galley_native.node first with g++, from the headers in
// build/gpu-carry, as device-run.sh does), --python=python3, --load-secs=8, --server=<bundle>,
// --skip=smi,load (for a dry run without a GPU, e.g. with GALLEY_NVML_LIBRARY naming a stand-in),
// --out=DIR (default: a temporary folder). Prints one line per check and a summary; exits 1 if any
// check failed. Results go to <out>/nvml-gpu.json.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createChecks } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const pkg = fileURLToPath(new URL("../../", import.meta.url));
const carry = join(pkg, "build/gpu-carry");
const python = arg("python", "python3");
const loadSecs = Number(arg("load-secs", "8"));
const skip = new Set(arg("skip", "").split(",").filter(Boolean));
const serverBundle = arg("server", join(carry, "galley-server.mjs"));
const out = arg("out", mkdtempSync(join(tmpdir(), "galley-nvml-gpu-")));
mkdirSync(out, { recursive: true });

const { results, check, attempt } = createChecks();
const notes = {};
const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const round = (x, digits = 1) => (x === undefined ? "n/a" : Number(x.toFixed(digits)));

if (process.argv.includes("--build")) {
  const sources = readdirSync(join(pkg, "native"))
    .filter((f) => f.endsWith(".cc") && !f.startsWith("torch_"))
    .map((f) => join(pkg, "native", f));
  mkdirSync(join(pkg, "build/Release"), { recursive: true });
  const started = performance.now();
  execFileSync(
    "g++",
    [
      ...["-O2", "-std=c++17", "-fPIC", "-fexceptions", "-Wall", "-DNAPI_VERSION=8", "-DNAPI_CPP_EXCEPTIONS"],
      ...["-DNODE_GYP_MODULE_NAME=galley_native", "-DBUILDING_NODE_EXTENSION"],
      ...[`-I${join(carry, "node-include")}`, `-I${join(carry, "node-addon-api")}`],
      ...["-shared", "-o", join(pkg, "build/Release/galley_native.node"), ...sources, "-ldl"],
    ],
    { stdio: "inherit" },
  );
  console.log(`built galley_native.node in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

const { sampleGpus } = await import(pathToFileURL(join(pkg, "dist/index.js")).href);
const ranges = (gpu) => {
  const problems = [];
  const need = (field, ok) => {
    if (gpu[field] === undefined) problems.push(`${field} missing (${gpu.errors[field]})`);
    else if (!ok(gpu[field])) problems.push(`${field}=${gpu[field]}`);
  };
  need("utilization", (u) => u >= 0 && u <= 1);
  need("memoryTotalBytes", (t) => t >= 1 << 30);
  need("memoryUsedBytes", (u) => u >= 0 && u <= gpu.memoryTotalBytes);
  need("powerLimitWatts", (w) => w > 10 && w <= 2000);
  need("powerUsageWatts", (w) => w > 1 && w <= 1.5 * (gpu.powerLimitWatts ?? 2000));
  need("energyJoules", (j) => j > 0);
  return problems;
};

// 1. The addon's own readings.
const first = await sampleGpus();
notes.first = first;
check(
  "sampleGpus() finds NVML and the GPUs",
  first.available,
  first.available ? `driver ${first.driverVersion}, ${first.gpus.length} GPU(s)` : first.reason,
);
const gpus = first.available ? first.gpus : [];
for (const gpu of gpus) {
  check(
    `GPU ${gpu.index} uuid has Triton's gpu_uuid form`,
    /^GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/.test(gpu.uuid),
    gpu.uuid,
  );
  check(
    `GPU ${gpu.index} (${gpu.name}) every reading present and in range`,
    ranges(gpu).length === 0,
    ranges(gpu).join(", ") ||
      `util ${gpu.utilization}, mem ${round(gpu.memoryUsedBytes / 2 ** 30, 2)}/${round(gpu.memoryTotalBytes / 2 ** 30, 1)} GiB, power ${round(gpu.powerUsageWatts)}/${round(gpu.powerLimitWatts)} W, energy ${round(gpu.energyJoules)} J`,
  );
}
await attempt("concurrent samples agree on the GPUs", async () => {
  const [a, b] = await Promise.all([sampleGpus(), sampleGpus()]);
  const ids = (s) => (s.available ? s.gpus.map((g) => g.uuid).join() : s.reason);
  check("concurrent samples agree on the GPUs", a.available && ids(a) === ids(b) && ids(a) === ids(first), ids(a));
});

// 2. Against nvidia-smi.
if (!skip.has("smi") && gpus.length > 0) {
  await attempt("nvidia-smi agrees", async () => {
    const text = execFileSync(
      "nvidia-smi",
      [
        "--query-gpu=uuid,utilization.gpu,memory.used,memory.total,power.draw,power.limit",
        "--format=csv,noheader,nounits",
      ],
      { encoding: "utf8" },
    );
    notes.nvidiaSmi = text;
    const now = await sampleGpus();
    const smi = text
      .trim()
      .split("\n")
      .map((line) => {
        const [uuid, util, used, total, draw, limit] = line.split(",").map((c) => c.trim());
        return {
          uuid,
          util: Number(util),
          used: Number(used) * 2 ** 20,
          total: Number(total) * 2 ** 20,
          draw: Number(draw),
          limit: Number(limit),
        };
      });
    check(
      "nvidia-smi lists the same GPUs",
      smi
        .map((s) => s.uuid)
        .sort()
        .join() ===
        gpus
          .map((g) => g.uuid)
          .sort()
          .join(),
      smi.map((s) => s.uuid).join(),
    );
    for (const s of smi) {
      const g = now.available && now.gpus.find((x) => x.uuid === s.uuid);
      if (!g) continue;
      const d = `NVML ${round(g.memoryTotalBytes / 2 ** 20, 0)} MiB total, ${round(g.memoryUsedBytes / 2 ** 20, 0)} MiB used, ${round(g.powerUsageWatts)} W of ${round(g.powerLimitWatts)} W, ${round(g.utilization * 100, 0)} %; nvidia-smi ${round(s.total / 2 ** 20, 0)} MiB, ${round(s.used / 2 ** 20, 0)} MiB, ${s.draw} W of ${s.limit} W, ${s.util} %`;
      check(
        `${s.uuid}: memory total within 2% of nvidia-smi's`,
        Math.abs(g.memoryTotalBytes - s.total) <= 0.02 * s.total,
        d,
      );
      // nvidia-smi may count the driver's reserved memory as used (NVML's v1 call does too, v2 not).
      check(`${s.uuid}: memory used within 1 GiB of nvidia-smi's`, Math.abs(g.memoryUsedBytes - s.used) <= 2 ** 30, "");
      check(
        `${s.uuid}: power limit equals nvidia-smi's power.limit (±1 W)`,
        Math.abs(g.powerLimitWatts - s.limit) <= 1,
        "",
      );
      check(
        `${s.uuid}: power draw near nvidia-smi's (±30%, ±25 W)`,
        Math.abs(g.powerUsageWatts - s.draw) <= Math.max(25, 0.3 * s.draw),
        "",
      );
      check(
        `${s.uuid}: utilisation near nvidia-smi's (±20 points, idle)`,
        Math.abs(g.utilization * 100 - s.util) <= 20,
        "",
      );
    }
  });
}

/** A torch bf16 matmul loop on cuda:0 for `secs`; resolves when it is running, with its uuid. */
function startLoad(secs) {
  const code = `
import json, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
(a @ b); torch.cuda.synchronize()
uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
print(json.dumps({"ready": True, "uuid": str(uuid) if uuid is not None else None}), flush=True)
end = time.time() + ${secs}; n = 0
while time.time() < end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize(); n += 20
print(json.dumps({"matmuls": n, "tflops": n * 2 * 8192 ** 3 / ${secs} / 1e12}), flush=True)
`;
  const child = spawn(python, ["-c", code], { stdio: ["ignore", "pipe", "inherit"] });
  const lines = [];
  let buffered = "";
  let onLine;
  child.stdout.on("data", (chunk) => {
    buffered += chunk;
    for (let i = buffered.indexOf("\n"); i >= 0; i = buffered.indexOf("\n")) {
      const line = buffered.slice(0, i);
      if (line.startsWith("{")) lines.push(JSON.parse(line));
      buffered = buffered.slice(i + 1);
      onLine?.();
    }
  });
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const ready = new Promise((resolve, reject) => {
    onLine = () => lines[0]?.ready && resolve(lines[0]);
    exited.then((code) => reject(new Error(`the load exited (${code}) before it was ready`)));
  });
  return { ready, exited, lines };
}

// 3. Under load.
const loadGpu = (ready) => {
  const uuid = ready.uuid && `GPU-${ready.uuid.replace(/^GPU-/, "")}`;
  return gpus.find((g) => g.uuid === uuid) ?? gpus[0];
};
if (!skip.has("load") && gpus.length > 0) {
  await attempt("under a torch matmul load", async () => {
    // Memory is compared with a sample from before torch started: by the time it says it is ready it holds its tensors.
    const idle = await sampleGpus();
    const load = startLoad(loadSecs);
    const ready = await load.ready;
    const target = loadGpu(ready);
    const before = (await sampleGpus()).gpus.find((g) => g.uuid === target.uuid);
    const t0 = performance.now();
    const during = [];
    // Samples at 250 ms until the load ends: NVML's utilisation covers its last 1/6–1 s.
    let ended = false;
    load.exited.then(() => {
      ended = true;
    });
    while (!ended) {
      const s = await sampleGpus();
      if (s.available) during.push(s.gpus.find((g) => g.uuid === target.uuid));
      await wait(250);
    }
    const t1 = performance.now();
    const after = (await sampleGpus()).gpus.find((g) => g.uuid === target.uuid);
    const peakUtil = Math.max(...during.map((g) => g.utilization ?? 0));
    const peakPower = Math.max(...during.map((g) => g.powerUsageWatts ?? 0));
    const peakMemory = Math.max(...during.map((g) => g.memoryUsedBytes ?? 0));
    const idleMemory = idle.gpus.find((g) => g.uuid === target.uuid)?.memoryUsedBytes ?? 0;
    const joules = after.energyJoules - before.energyJoules;
    const meanWatts = joules / ((t1 - t0) / 1000);
    notes.load = {
      gpu: target.uuid,
      torch: load.lines,
      before,
      after,
      samples: during.length,
      peakUtil,
      peakPower,
      joules,
      meanWatts,
    };
    check(`load ran on ${target.uuid}`, load.lines.at(-1)?.matmuls > 0, JSON.stringify(load.lines.at(-1)));
    check(
      "utilisation rises to ≥ 0.5 under load",
      peakUtil >= 0.5,
      `idle ${before.utilization}, peak ${peakUtil} over ${during.length} samples`,
    );
    check(
      "power rises under load",
      peakPower > before.powerUsageWatts + 20,
      `idle ${round(before.powerUsageWatts)} W, peak ${round(peakPower)} W (limit ${round(before.powerLimitWatts)} W)`,
    );
    check(
      "memory used rises while torch holds its tensors",
      peakMemory > idleMemory + 2 ** 26,
      `${round(idleMemory / 2 ** 20, 0)} MiB → ${round(peakMemory / 2 ** 20, 0)} MiB`,
    );
    check(
      "energy grows, at a mean power between idle and the limit",
      joules > 0 && meanWatts > before.powerUsageWatts * 0.8 && meanWatts < before.powerLimitWatts * 1.2,
      `${round(joules)} J over ${round((t1 - t0) / 1000, 2)} s = ${round(meanWatts)} W`,
    );
  });
}

// 4. Through a real server's /metrics.
if (!existsSync(serverBundle)) {
  check("server bundle present (prepare-carry.sh makes build/gpu-carry/galley-server.mjs)", false, serverBundle);
} else {
  await attempt("a real server's /metrics", async () => {
    // The bundle imports @galley/backends-native by name: make it resolvable beside the bundle.
    const link = join(dirname(serverBundle), "node_modules/@galley/backends-native");
    if (!existsSync(link)) {
      mkdirSync(dirname(link), { recursive: true });
      symlinkSync(pkg, link, "dir");
    }
    const { createServer, createLogger } = await import(pathToFileURL(serverBundle).href);
    const logLines = [];
    const repository = mkdtempSync(join(tmpdir(), "galley-nvml-repo-"));
    const server = createServer({
      modelRepositories: [repository],
      http: false,
      grpc: false,
      metrics: { host: "127.0.0.1", port: 0, intervalMs: 500 },
      log: createLogger({ write: (line) => logLines.push(line) }),
    });
    try {
      const { metrics } = await server.listen();
      const scrape = async () => {
        const text = await (await fetch(`http://127.0.0.1:${metrics.port}/metrics`)).text();
        const samples = [...text.matchAll(/^(nv_gpu_\w+|nv_energy_consumption)\{([^}]*)\} (\S+)$/gm)].map((m) => ({
          name: m[1],
          labels: Object.fromEntries([...m[2].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]])),
          value: Number(m[3]),
        }));
        return { text, samples };
      };
      const s = await scrape();
      notes.serverLog = logLines;
      notes.metrics = s.text.split("\n").filter((l) => /nv_gpu_|nv_energy/.test(l));
      const families = [
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        "nv_energy_consumption",
      ];
      for (const name of families) {
        const type = name === "nv_energy_consumption" ? "counter" : "gauge";
        const found = s.samples.filter((x) => x.name === name);
        check(
          `/metrics ${name}: # TYPE ${type}, one sample per GPU, labelled gpu_uuid only`,
          s.text.includes(`# TYPE ${name} ${type}`) &&
            found
              .map((x) => x.labels.gpu_uuid)
              .sort()
              .join() ===
              gpus
                .map((g) => g.uuid)
                .sort()
                .join() &&
            found.every((x) => Object.keys(x.labels).join() === "gpu_uuid" && Number.isFinite(x.value)),
          found.map((x) => `${x.labels.gpu_uuid}=${x.value}`).join(" "),
        );
      }
      check(
        "the server logged the GPUs it collects metrics for",
        logLines.some((l) => /Collecting metrics for GPU \d+: .*\(GPU-/.test(l)),
        logLines
          .filter((l) => /GPU/.test(l))
          .join(" | ")
          .trim(),
      );
      if (!skip.has("load") && gpus.length > 0) {
        const energy = (scrape) =>
          scrape.samples.filter((x) => x.name === "nv_energy_consumption").reduce((a, x) => a + x.value, 0);
        const e0 = energy(s);
        const load = startLoad(Math.min(loadSecs, 4));
        await load.ready;
        let peak = 0;
        while (!(await Promise.race([load.exited.then(() => true), wait(500).then(() => false)]))) {
          const now = await scrape();
          peak = Math.max(peak, ...now.samples.filter((x) => x.name === "nv_gpu_utilization").map((x) => x.value));
        }
        await wait(1200); // two --metrics-interval-ms of 500: the last sample covers the end of the load
        const e1 = energy(await scrape());
        check(
          "/metrics under load: nv_gpu_utilization rises and nv_energy_consumption grows",
          peak >= 0.5 && e1 > e0,
          `peak utilisation ${peak}, energy ${round(e0)} J → ${round(e1)} J`,
        );
      }
    } finally {
      await server.close();
      rmSync(repository, { recursive: true, force: true });
    }
  });
}

const failed = results.filter((r) => !r.ok);
writeFileSync(join(out, "nvml-gpu.json"), JSON.stringify({ results, notes }, null, 2));
console.log(
  `\n${results.length - failed.length} passed, ${failed.length} failed (details in ${join(out, "nvml-gpu.json")})`,
);
process.exit(failed.length > 0 ? 1 : 0);
