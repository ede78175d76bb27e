// CUDA graphs in the torch addon (`cudaGraphs`, the config's optimization.cuda.graphs): plain
// JavaScript over dist/, run by device-run.sh's checks on the GPU machine. Each check compares a
// model run with graphs against the same model run eagerly on the same GPU. Run from
// packages/backends-native:
//
//   node test/gpu/torch-graphs-gpu.mjs [--python=python3] [--out=DIR]
//
// With GALLEY_GPU_DEVICE=cpu (device-run.sh's own check on a CPU machine) it checks only that a CPU
// model ignores the option. Prints one line per check; exits 1 if any failed.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadTorchModel } from "../../dist/torch.js";
import { createChecks } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;
const python = arg("python", "python3");
const out = arg("out", mkdtempSync(join(tmpdir(), "galley-torch-graphs-")));
const device = process.env.GALLEY_GPU_DEVICE ?? "cuda";
mkdirSync(out, { recursive: true });

const { results, check, attempt } = createChecks();

// A denoiser-like net (convolutions in a scripted loop, two outputs) and one that reads a value
// back to the host in forward, which a capture cannot contain.
execFileSync(python, [fileURLToPath(new URL("graph_models.py", import.meta.url)), out], { stdio: "inherit" });

let seed = 1;
function random(n) {
  const v = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    v[i] = seed / 2 ** 32 - 0.5;
  }
  return v;
}
const bytes = (v) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
const floats = (data) => new Float32Array(data.slice().buffer);
function maxDiff(a, b) {
  if (a.length !== b.length) return Number.POSITIVE_INFINITY;
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}
const netInputs = (batch) => [
  { datatype: "FP32", shape: [batch, 4, 16, 16], data: bytes(random(batch * 4 * 16 * 16)) },
  { datatype: "FP32", shape: [batch], data: bytes(random(batch)) },
];
const options = { device, deviceId: 0 };

if (device !== "cuda") {
  await attempt("a CPU model ignores cudaGraphs", async () => {
    const model = await loadTorchModel(join(out, "net.pt"), { ...options, cudaGraphs: true });
    const states = [];
    for (let i = 0; i < 5; i++) states.push((await model.execute(netInputs(2), { graph: true })).cudaGraph ?? "-");
    await model.close();
    check(
      "a CPU model ignores cudaGraphs",
      states.every((s) => s === "-"),
      states.join(" "),
    );
  });
} else {
  const graphed = await loadTorchModel(join(out, "net.pt"), { ...options, cudaGraphs: true, cudaGraphLimit: 2 });
  const eager = await loadTorchModel(join(out, "net.pt"), options);

  await attempt("captured on a shape's 4th call, replayed after, outputs equal eager", async () => {
    const a = netInputs(8);
    const b = netInputs(8);
    const states = [];
    let worst = 0;
    for (let i = 0; i < 8; i++) {
      const inputs = i % 2 === 0 ? a : b;
      const got = await graphed.execute(inputs, { graph: true });
      const want = await eager.execute(inputs);
      states.push(got.cudaGraph ?? "-");
      for (let k = 0; k < 2; k++)
        worst = Math.max(worst, maxDiff(floats(got.outputs[k].data), floats(want.outputs[k].data)));
    }
    const expected = "- - - captured replayed replayed replayed replayed";
    check(
      "captured on a shape's 4th call, replayed after, outputs equal eager",
      states.join(" ") === expected && worst <= 1e-4,
      `states ${states.join(" ")}; max |diff| ${worst}`,
    );
  });

  await attempt("without graph: true a call runs eagerly", async () => {
    const r = await graphed.execute(netInputs(8));
    check("without graph: true a call runs eagerly", r.cudaGraph === undefined, `state ${r.cudaGraph ?? "-"}`);
  });

  await attempt("a kept output is not overwritten by the next replay", async () => {
    const a = netInputs(8);
    const b = netInputs(8);
    const keptA = (await graphed.execute(a, { graph: true, resident: [0] })).outputs[0].tensor;
    const keptB = (await graphed.execute(b, { graph: true, resident: [0] })).outputs[0].tensor;
    const wantA = floats((await eager.execute(a)).outputs[0].data);
    const wantB = floats((await eager.execute(b)).outputs[0].data);
    const dA = maxDiff(floats(await keptA.toHost()), wantA);
    const dB = maxDiff(floats(await keptB.toHost()), wantB);
    keptA.dispose();
    keptB.dispose();
    check("a kept output is not overwritten by the next replay", dA <= 1e-4 && dB <= 1e-4, `max |diff| ${dA}, ${dB}`);
  });

  await attempt("each shape its own graph, up to cudaGraphLimit", async () => {
    const states = (batch) =>
      (async () => {
        const s = [];
        for (let i = 0; i < 5; i++) s.push((await graphed.execute(netInputs(batch), { graph: true })).cudaGraph ?? "-");
        return s.join(" ");
      })();
    const three = await states(3);
    const five = await states(5);
    check(
      "each shape its own graph, up to cudaGraphLimit",
      three === "- - - captured replayed" && five === "- - - - -",
      `batch 3: ${three}; batch 5 (past the limit of 2): ${five}`,
    );
  });

  await attempt("replay against eager, batch 8 (timing)", async () => {
    const inputs = netInputs(8);
    const time = async (model, graph) => {
      for (let i = 0; i < 10; i++) await model.execute(inputs, { graph });
      let infer = 0;
      const n = 200;
      const start = performance.now();
      for (let i = 0; i < n; i++) infer += (await model.execute(inputs, { graph })).inferNs;
      return { wall: (performance.now() - start) / n, infer: infer / n / 1e6 };
    };
    const e = await time(eager, false);
    const g = await time(graphed, true);
    check(
      "replay against eager, batch 8 (timing)",
      true,
      `per call: eager ${e.wall.toFixed(3)} ms (forward ${e.infer.toFixed(3)}), graph ${g.wall.toFixed(3)} ms (forward ${g.infer.toFixed(3)}); ${(e.wall / g.wall).toFixed(2)}x`,
    );
  });
  await graphed.close();
  await eager.close();

  await attempt("a module that waits for the GPU is not captured and still answers", async () => {
    const model = await loadTorchModel(join(out, "sync.pt"), { ...options, cudaGraphs: true });
    const x = Float32Array.from([1, 2, 3, 4]);
    const states = [];
    const errors = [];
    let right = true;
    for (let i = 0; i < 10; i++) {
      const r = await model.execute([{ datatype: "FP32", shape: [4], data: bytes(x) }], { graph: true });
      states.push(r.cudaGraph ?? "-");
      if (r.cudaGraphError) errors.push(r.cudaGraphError);
      right &&= floats(r.outputs[0].data).join() === "2,4,6,8";
    }
    await model.close();
    check(
      "a module that waits for the GPU is not captured and still answers",
      right && states.every((s) => s === "-") && errors.length === 2,
      `${errors.length} failed captures (then eager): ${(errors[0] ?? "").slice(0, 160)}`,
    );
  });
}

const failed = results.filter((r) => !r.ok);
writeFileSync(join(out, "torch-graphs-gpu.json"), JSON.stringify({ device, results }, null, 2));
console.log(`\n${results.length - failed.length} passed, ${failed.length} failed (${device})`);
process.exit(failed.length > 0 ? 1 : 0);
