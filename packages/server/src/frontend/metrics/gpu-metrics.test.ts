import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../base/log.js";
import { type GpuMetricsSource, startGpuMetrics } from "./gpu-metrics.js";

const quiet = createLogger({ info: false, warning: false, error: false });
const ONE_GPU: GpuMetricsSource = {
  sample: async () => ({
    available: true,
    driverVersion: "",
    gpus: [{ index: 0, uuid: "GPU-1", name: "", utilization: 0.5, energyJoules: 10, errors: {} }],
  }),
};

describe("startGpuMetrics", () => {
  it("writes only the families a GPU has a reading for", async () => {
    const gpu = await startGpuMetrics({ source: ONE_GPU, log: quiet });
    const registry = new Registry();
    gpu?.register(registry);
    gpu?.close();
    const text = await registry.metrics();
    expect(text).toMatch(/^nv_gpu_utilization\{gpu_uuid="GPU-1"\} 0.5$/m);
    expect(text).toMatch(/^nv_energy_consumption\{gpu_uuid="GPU-1"\} 0$/m);
    expect(text).not.toMatch(/nv_gpu_memory|nv_gpu_power/);
  });

  it("logs each GPU by its CUDA number: the source's order, CUDA_VISIBLE_DEVICES applied (NVML's 3 and 1 as CUDA's 0 and 1)", async () => {
    const lines: string[] = [];
    const log = createLogger({ write: (line) => lines.push(line) });
    const visible: GpuMetricsSource = {
      sample: async () => ({
        available: true,
        driverVersion: "",
        gpus: [
          { index: 3, uuid: "GPU-3", name: "H100", errors: {} },
          { index: 1, uuid: "GPU-1", name: "H100", errors: {} },
        ],
      }),
    };
    (await startGpuMetrics({ source: visible, log }))?.close();
    expect(
      lines.filter((l) => l.includes("Collecting metrics")).map((l) => l.replace(/^.*Collecting/, "Collecting")),
    ).toEqual(["Collecting metrics for GPU 0: H100 (GPU-3)\n", "Collecting metrics for GPU 1: H100 (GPU-1)\n"]);
  });

  it("resolves undefined for a source that throws at start", async () => {
    const failing: GpuMetricsSource = { sample: () => Promise.reject(new Error("no")) };
    expect(await startGpuMetrics({ source: failing, log: quiet })).toBeUndefined();
  });

  it("gives up on a source that never answers at start, after firstSampleTimeoutMs", async () => {
    const lines: string[] = [];
    const log = createLogger({ write: (line) => lines.push(line) });
    const hung: GpuMetricsSource = { sample: () => new Promise(() => {}) };
    expect(await startGpuMetrics({ source: hung, log, firstSampleTimeoutMs: 20 })).toBeUndefined();
    expect(lines.join("")).toMatch(/GPU metrics unavailable: no GPU reading within 0.02 s/);
  });

  it("never keeps the process alive: a process that only samples exits by itself", () => {
    const module = fileURLToPath(new URL("./gpu-metrics.ts", import.meta.url));
    const script = `
      const { startGpuMetrics } = await import(${JSON.stringify(module)});
      const log = { info() {}, warn() {}, error() {}, verbose() {} };
      const source = { sample: async () => ({ available: true, driverVersion: "", gpus: [] }) };
      await startGpuMetrics({ source, intervalMs: 10, log });
      process.stdout.write("started");`;
    const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(out).toBe("started");
  });
});
