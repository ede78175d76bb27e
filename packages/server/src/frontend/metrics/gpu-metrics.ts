import type { GpuReadings, GpuSample } from "@galley/backends-native";
import { Counter, Gauge, type Registry } from "prom-client";
import type { Logger } from "../../base/log.js";

/**
 * Where GPU readings come from: NVML through the native addon in a real server
 * (`nvmlGpuSource`); any object with this method in tests (`metrics.gpuSource`).
 * `sample()` may reject or answer `available: false`: neither breaks /metrics. It lists the GPUs
 * in CUDA's order (`CUDA_VISIBLE_DEVICES` applied): a GPU's position is its CUDA number.
 *
 * @internal
 */
export interface GpuMetricsSource {
  sample(): Promise<GpuSample>;
}

/** Options for {@link startGpuMetrics}. */
export interface GpuMetricsOptions {
  source: GpuMetricsSource;
  /** `--metrics-interval-ms`: time between samples (default 2000). */
  intervalMs?: number;
  /** How long startup waits for the first sample (default 10 s; NVML can hang on a GPU in a bad state). */
  firstSampleTimeoutMs?: number;
  log: Logger;
}

/** Sampled GPU metrics: written into each scrape's registry, stopped with the server. */
export interface GpuMetrics {
  /** Add the GPU families to `registry`, one series per GPU per reading it has now. */
  register(registry: Registry): void;
  /** Free memory (total − used) of every GPU in the latest sample, summed; undefined without a reading. */
  memoryFreeBytes(): number | undefined;
  /** Stop sampling (idempotent). */
  close(): void;
}

type Family = [name: string, help: string, value: (gpu: GpuReadings) => number | undefined];

/** Triton's GPU gauges, names and help texts as its core registers them (metrics.cc). */
const GAUGES: Family[] = [
  ["nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", (g) => g.utilization],
  ["nv_gpu_memory_total_bytes", "GPU total memory, in bytes", (g) => g.memoryTotalBytes],
  ["nv_gpu_memory_used_bytes", "GPU used memory, in bytes", (g) => g.memoryUsedBytes],
  ["nv_gpu_power_usage", "GPU power usage in watts", (g) => g.powerUsageWatts],
  ["nv_gpu_power_limit", "GPU power management limit in watts", (g) => g.powerLimitWatts],
];
const ENERGY_NAME = "nv_energy_consumption";
const ENERGY_HELP = "GPU energy consumption in joules since the Triton Server started";

/**
 * Sample the GPUs once now and then every `intervalMs` (Triton's `--metrics-interval-ms`), off
 * the scrape path: /metrics shows the latest sample. Resolves `undefined`, after one log line
 * saying why, when there is nothing to sample (no addon, no NVML, no GPU): the GPU families are
 * then absent from /metrics, not zero. `nv_energy_consumption` counts joules from the first
 * sample, as Triton's does. The timer never keeps the process alive.
 */
export async function startGpuMetrics(options: GpuMetricsOptions): Promise<GpuMetrics | undefined> {
  const { source, log } = options;
  const intervalMs = Math.max(1, options.intervalMs ?? 2000);
  const sample = () =>
    source.sample().catch((error: unknown): GpuSample => ({ available: false, reason: String(error) }));
  const timeoutMs = options.firstSampleTimeoutMs ?? 10_000;
  let timeout: NodeJS.Timeout | undefined;
  const first = await Promise.race([
    sample(),
    new Promise<GpuSample>((resolve) => {
      timeout = setTimeout(
        () => resolve({ available: false, reason: `no GPU reading within ${timeoutMs / 1000} s` }),
        timeoutMs,
      );
      timeout.unref();
    }),
  ]);
  clearTimeout(timeout);
  if (!first.available) {
    log.info(`GPU metrics unavailable: ${first.reason}`);
    return undefined;
  }
  // The source lists the GPUs in CUDA's order (CUDA_VISIBLE_DEVICES applied): the number is CUDA's, as Triton logs it.
  for (const [ordinal, gpu] of first.gpus.entries()) {
    log.info(`Collecting metrics for GPU ${ordinal}: ${gpu.name || "unnamed"} (${gpu.uuid})`);
  }

  let latest: GpuReadings[] = [];
  const energy = new Map<string, { last: number; joules: number }>();
  const warned = new Set<string>();
  let failing = false;
  const update = (s: GpuSample) => {
    if (!s.available) {
      // Gauges of a failed sample are left out rather than shown stale; the energy counter stays.
      if (!failing) log.warn(`GPU metrics sample failed: ${s.reason} (GPU gauges left out until one succeeds)`);
      failing = true;
      latest = [];
      return;
    }
    if (failing) log.info("GPU metrics sampling recovered");
    failing = false;
    latest = s.gpus;
    for (const gpu of s.gpus) {
      for (const [field, reason] of Object.entries(gpu.errors)) {
        const key = `${gpu.uuid} ${field}`;
        if (!warned.has(key)) log.warn(`GPU ${gpu.index} (${gpu.uuid}): no ${field} reading: ${reason}`);
        warned.add(key);
      }
      if (gpu.energyJoules === undefined) continue;
      const seen = energy.get(gpu.uuid);
      if (!seen) energy.set(gpu.uuid, { last: gpu.energyJoules, joules: 0 });
      else {
        // NVML's total restarts when the driver reloads: count nothing for that step.
        if (gpu.energyJoules >= seen.last) seen.joules += gpu.energyJoules - seen.last;
        seen.last = gpu.energyJoules;
      }
    }
  };
  update(first);

  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    timer = setTimeout(() => {
      sample().then((s) => {
        if (closed) return;
        update(s);
        schedule();
      });
    }, intervalMs);
    timer.unref();
  };
  schedule();

  return {
    register(registry) {
      const uuids = new Set(latest.map((g) => g.uuid));
      for (const [name, help, value] of GAUGES) {
        const present = latest.filter((g) => value(g) !== undefined);
        if (present.length === 0) continue;
        const gauge = new Gauge({ name, help, labelNames: ["gpu_uuid"], registers: [registry] });
        for (const g of present) gauge.set({ gpu_uuid: g.uuid }, value(g) as number);
      }
      // The counter goes on through a failed sample; a GPU no longer listed drops out.
      const counted = [...energy].filter(([uuid]) => uuids.has(uuid) || failing);
      if (counted.length > 0) {
        const counter = new Counter({
          name: ENERGY_NAME,
          help: ENERGY_HELP,
          labelNames: ["gpu_uuid"],
          registers: [registry],
        });
        for (const [uuid, { joules }] of counted) counter.inc({ gpu_uuid: uuid }, joules);
      }
    },
    memoryFreeBytes() {
      const read = latest.filter((g) => g.memoryTotalBytes !== undefined && g.memoryUsedBytes !== undefined);
      if (read.length === 0) return undefined;
      return read.reduce((sum, g) => sum + (g.memoryTotalBytes as number) - (g.memoryUsedBytes as number), 0);
    },
    close() {
      closed = true;
      clearTimeout(timer);
    },
  };
}
