// GPU metrics on /metrics (PROTOCOL.md §7.5): without NVML (this machine, CI) the families are
// absent and the server starts with one log line saying why; with readings from a source given at
// the server's options (`metrics.gpuSource`, internal) a real server serves Triton's names, help
// texts, types and `gpu_uuid` labels, leaves out what a card cannot read, counts energy from its
// first sample, survives a failing source, and stops sampling on close. The NVML path itself is
// checked on a GPU by packages/backends-native/test/gpu/nvml-gpu.mjs.
import { existsSync } from "node:fs";
import type { GpuReadings, GpuSample } from "@galley/backends-native";
import { afterEach, describe, expect, it } from "vitest";
import type { GpuMetricsSource } from "../src/internal.js";
import { cleanup, recordingLog, startServer, tempRepository, waitFor } from "./support/harness.js";
import { findSamples, sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

const GPU0 = "GPU-00000000-1111-2222-3333-444444444444";
const GPU1 = "GPU-55555555-6666-7777-8888-999999999999";
const GPU_FAMILIES = [
  "nv_gpu_utilization",
  "nv_gpu_memory_total_bytes",
  "nv_gpu_memory_used_bytes",
  "nv_gpu_power_usage",
  "nv_gpu_power_limit",
  "nv_energy_consumption",
];

/** Two GPUs as NVML reports them; GPU1 has no power or energy readings. */
function reading(energyJoules: number, utilization = 0.25): GpuReadings[] {
  return [
    {
      index: 0,
      uuid: GPU0,
      name: "Fixed GPU",
      utilization,
      memoryTotalBytes: 150754820096,
      memoryUsedBytes: 1073741824,
      powerUsageWatts: 123.5,
      powerLimitWatts: 700,
      energyJoules,
      errors: {},
    },
    {
      index: 1,
      uuid: GPU1,
      name: "Fixed GPU",
      utilization: 0,
      memoryTotalBytes: 85899345920,
      memoryUsedBytes: 0,
      errors: { powerUsageWatts: "Not Supported", powerLimitWatts: "Not Supported", energyJoules: "Not Supported" },
    },
  ];
}

/**
 * A scripted source: answers `samples[i]` at its i-th call (the last one from then on), counts
 * the calls, and lets a test wait for the n-th call (call n+1 only starts after sample n is in).
 */
class ScriptedGpus implements GpuMetricsSource {
  calls = 0;
  readonly #samples: (GpuSample | Error)[];
  readonly #waiters: { n: number; resolve: () => void }[] = [];

  constructor(samples: (GpuSample | Error)[]) {
    this.#samples = samples;
  }

  async sample(): Promise<GpuSample> {
    const answer = this.#samples[Math.min(this.calls, this.#samples.length - 1)] as GpuSample | Error;
    this.calls++;
    for (const w of this.#waiters.filter((x) => x.n <= this.calls)) w.resolve();
    if (answer instanceof Error) throw answer;
    return answer;
  }

  /** Resolves once `sample()` has been called `n` times. */
  called(n: number): Promise<void> {
    if (this.calls >= n) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ n, resolve }));
  }
}

async function gpuServer(source: GpuMetricsSource, options: { allowGpuMetrics?: boolean } = {}) {
  const { log, lines } = recordingLog();
  const running = await startServer({
    modelRepositories: [tempRepository()],
    log,
    metrics: { gpuSource: source, intervalMs: 5, ...options },
  });
  return { ...running, lines };
}

describe("GPU metrics", () => {
  it.skipIf(existsSync("/dev/nvidiactl"))(
    "without NVML: no GPU family at all, and one log line saying why",
    async () => {
      const { log, lines } = recordingLog();
      const { metricsUrl } = await startServer({ modelRepositories: [tempRepository()], log, metrics: true });
      const s = await scrape(metricsUrl);
      expect(s.text).not.toMatch(/nv_gpu_|nv_energy_consumption/);
      expect(s.types.get("nv_cpu_utilization")).toBe("gauge");
      const why = lines.filter((l) => /GPU metrics unavailable: /.test(l));
      expect(why).toHaveLength(1);
      expect(why[0]).toMatch(/libnvidia-ml\.so\.1|native addon/);
    },
  );

  it("serves Triton's families, help texts, types and gpu_uuid labels", async () => {
    const source = new ScriptedGpus([{ available: true, driverVersion: "999.1", gpus: reading(1000) }]);
    const { metricsUrl, lines } = await gpuServer(source);
    const s = await scrape(metricsUrl);
    for (const line of [
      "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
      "# TYPE nv_gpu_utilization gauge",
      "# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes",
      "# TYPE nv_gpu_memory_total_bytes gauge",
      "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes",
      "# TYPE nv_gpu_memory_used_bytes gauge",
      "# HELP nv_gpu_power_usage GPU power usage in watts",
      "# TYPE nv_gpu_power_usage gauge",
      "# HELP nv_gpu_power_limit GPU power management limit in watts",
      "# TYPE nv_gpu_power_limit gauge",
      "# HELP nv_energy_consumption GPU energy consumption in joules since the Triton Server started",
      "# TYPE nv_energy_consumption counter",
      `nv_gpu_utilization{gpu_uuid="${GPU0}"} 0.25`,
      `nv_gpu_memory_total_bytes{gpu_uuid="${GPU0}"} 150754820096`,
      `nv_gpu_memory_used_bytes{gpu_uuid="${GPU0}"} 1073741824`,
      `nv_gpu_power_usage{gpu_uuid="${GPU0}"} 123.5`,
      `nv_gpu_power_limit{gpu_uuid="${GPU0}"} 700`,
      `nv_energy_consumption{gpu_uuid="${GPU0}"} 0`,
      `nv_gpu_utilization{gpu_uuid="${GPU1}"} 0`,
      `nv_gpu_memory_total_bytes{gpu_uuid="${GPU1}"} 85899345920`,
    ]) {
      expect(s.text.split("\n"), line).toContain(line);
    }
    // Every GPU sample carries exactly the gpu_uuid label.
    for (const name of GPU_FAMILIES) {
      for (const x of findSamples(s, name)) expect(Object.keys(x.labels), name).toEqual(["gpu_uuid"]);
    }
    // A reading the card does not give is left out, not shown as 0.
    for (const name of ["nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"]) {
      expect(findSamples(s, name, { gpu_uuid: GPU1 }), name).toEqual([]);
    }
    expect(lines.filter((l) => /Collecting metrics for GPU \d: Fixed GPU \(GPU-/.test(l))).toHaveLength(2);
    expect(lines.filter((l) => l.includes(`GPU 1 (${GPU1}): no powerUsageWatts reading: Not Supported`))).toHaveLength(
      1,
    );
  });

  it("samples every --metrics-interval-ms; energy counts from the first sample, as Triton's", async () => {
    const source = new ScriptedGpus([
      { available: true, driverVersion: "", gpus: reading(1000, 0.1) },
      { available: true, driverVersion: "", gpus: reading(1012.5, 0.9) },
      // The driver reloaded: NVML's total restarted. The counter never goes back.
      { available: true, driverVersion: "", gpus: reading(3, 0.9) },
      { available: true, driverVersion: "", gpus: reading(5, 0.9) },
    ]);
    const { metricsUrl } = await gpuServer(source);
    await source.called(3);
    let s = await scrape(metricsUrl);
    expect(sampleValue(s, "nv_gpu_utilization", { gpu_uuid: GPU0 })).toBe(0.9);
    // Sampling goes on while this scrapes: the 4th sample may be in already.
    expect([12.5, 14.5]).toContain(sampleValue(s, "nv_energy_consumption", { gpu_uuid: GPU0 }));
    await source.called(5);
    s = await scrape(metricsUrl);
    expect(sampleValue(s, "nv_energy_consumption", { gpu_uuid: GPU0 })).toBe(14.5);
  });

  it("a failing source never breaks /metrics: gauges left out, energy kept, one warning", async () => {
    const source = new ScriptedGpus([
      { available: true, driverVersion: "", gpus: reading(1000) },
      { available: true, driverVersion: "", gpus: reading(1002) },
      new Error("NVML went away"),
    ]);
    const { metricsUrl, lines } = await gpuServer(source);
    await source.called(6);
    const s = await scrape(metricsUrl);
    expect(s.types.get("nv_cpu_utilization")).toBe("gauge");
    expect(s.text).not.toMatch(/^nv_gpu_/m);
    expect(sampleValue(s, "nv_energy_consumption", { gpu_uuid: GPU0 })).toBe(2);
    expect(lines.filter((l) => l.includes("GPU metrics sample failed: Error: NVML went away"))).toHaveLength(1);
  });

  it("--allow-gpu-metrics=false: the source is never asked", async () => {
    const source = new ScriptedGpus([{ available: true, driverVersion: "", gpus: reading(1) }]);
    const { metricsUrl } = await gpuServer(source, { allowGpuMetrics: false });
    const s = await scrape(metricsUrl);
    expect(s.text).not.toMatch(/nv_gpu_|nv_energy_consumption/);
    expect(source.calls).toBe(0);
  });

  it("a source that has no GPU at start: absent, one line why, never asked again", async () => {
    const source = new ScriptedGpus([{ available: false, reason: "NVML reports no GPUs" }]);
    const { metricsUrl, lines, close } = await gpuServer(source);
    expect((await scrape(metricsUrl)).text).not.toMatch(/nv_gpu_|nv_energy_consumption/);
    expect(lines.filter((l) => l.includes("GPU metrics unavailable: NVML reports no GPUs"))).toHaveLength(1);
    await close();
    expect(source.calls).toBe(1);
  });

  it("stops sampling on close", async () => {
    const source = new ScriptedGpus([{ available: true, driverVersion: "", gpus: reading(1) }]);
    const { close } = await gpuServer(source);
    await source.called(3);
    await close();
    const after = source.calls;
    // A bounded look for a call that must not come (50 intervals), not a synchronisation.
    await expect(waitFor(() => source.calls > after + 1, { timeoutMs: 250 })).rejects.toThrow();
  });
});
