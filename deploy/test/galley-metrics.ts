import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger, createServer } from "@galley/server";
import type { GpuMetricsSource } from "@galley/server/internal";

/** One GPU with every reading, so that the GPU families are exported on machines without one. */
const oneGpu: GpuMetricsSource = {
  sample: async () => ({
    available: true,
    driverVersion: "",
    gpus: [
      {
        index: 0,
        uuid: "GPU-00000000-0000-0000-0000-000000000000",
        name: "stand-in",
        utilization: 0.5,
        memoryTotalBytes: 1 << 30,
        memoryUsedBytes: 1 << 20,
        powerUsageWatts: 100,
        powerLimitWatts: 700,
        energyJoules: 1,
        errors: {},
      },
    ],
  }),
};

/**
 * The metric names a running Galley exports: a server with every optional family switched on
 * (response cache, batch-size and first-response histograms, GPU metrics from a stand-in GPU, since NVML is absent
 * here) and an empty repository, scraped once. Families with no
 * samples yet still print their `# TYPE` line; histograms and summaries add their suffixes.
 */
export async function exportedMetricNames(): Promise<Set<string>> {
  const repository = await mkdtemp(join(tmpdir(), "galley-deploy-"));
  const server = createServer({
    modelRepositories: [repository],
    http: false,
    grpc: false,
    metrics: { host: "127.0.0.1", port: 0, batchSizeHistogram: true, histogramLatencies: true, gpuSource: oneGpu },
    responseCacheBytes: 1 << 20,
    log: createLogger({ info: false, warning: false, error: false }),
  });
  try {
    const { metrics } = await server.listen();
    if (!metrics) throw new Error("the metrics listener did not start");
    const text = await (await fetch(`http://127.0.0.1:${metrics.port}/metrics`)).text();
    const names = new Set<string>();
    for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      if (!name) continue;
      names.add(name);
      if (type === "histogram") for (const suffix of ["_bucket", "_sum", "_count"]) names.add(name + suffix);
      if (type === "summary") for (const suffix of ["_sum", "_count"]) names.add(name + suffix);
    }
    return names;
  } finally {
    await server.close();
    await rm(repository, { recursive: true, force: true });
  }
}
