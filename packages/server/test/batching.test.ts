// Dynamic batching over the real server: concurrent requests to mlp_classifier (dynamic_batching,
// one instance) are merged, and the batches are visible in batch_stats, the execution count, the
// opt-in batch-size histogram and the verbose log.
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, fp32Bytes, readFp32, recordingLog, startServer } from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

describe("dynamic batching you can see", () => {
  it("merges concurrent requests and reports the batch sizes everywhere", async () => {
    const { log, lines } = recordingLog();
    log.update({ log_verbose_level: 1 });
    const { client, metricsUrl } = await startServer({ metrics: { batchSizeHistogram: true }, log });
    const requests = 48;
    const responses = await Promise.all(
      Array.from({ length: requests }, (_, k) =>
        client.modelInfer({
          modelName: "mlp_classifier",
          inputs: [{ name: "INPUT", datatype: "FP32", shape: [1n, 64n] }],
          rawInputContents: [fp32Bytes(Array.from({ length: 64 }, (_, i) => Math.sin(i + k)))],
        }),
      ),
    );
    for (const response of responses) {
      const probabilities = readFp32(response.rawOutputContents[0]);
      expect(probabilities).toHaveLength(10);
      expect(probabilities.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
    }
    const stats = (await client.modelStatistics({ name: "mlp_classifier" })).modelStats[0];
    expect(stats?.inferenceCount).toBe(BigInt(requests));
    const executions = Number(stats?.executionCount ?? 0n);
    expect(executions).toBeLessThan(requests);
    const sizes = (stats?.batchStats ?? []).map(
      (b) => [Number(b.batchSize), Number(b.computeInfer?.count ?? 0n)] as const,
    );
    expect(sizes.some(([size]) => size > 1)).toBe(true);
    expect(sizes.reduce((n, [size, count]) => n + size * count, 0)).toBe(requests);

    const metrics = await scrape(metricsUrl);
    const labels = { model: "mlp_classifier", version: "1" };
    expect(sampleValue(metrics, "nv_inference_exec_count", labels)).toBe(executions);
    expect(sampleValue(metrics, "galley_inference_batch_size_count", labels)).toBe(executions);
    expect(sampleValue(metrics, "galley_inference_batch_size_sum", labels)).toBe(requests);
    expect(sampleValue(metrics, "galley_inference_batch_size_bucket", { ...labels, le: "1" })).toBe(
      sizes.find(([size]) => size === 1)?.[1] ?? 0,
    );
    const batchLines = lines.filter((l) => l.includes("model 'mlp_classifier': batch of size"));
    expect(batchLines).toHaveLength(executions);
    expect(
      batchLines.some((l) =>
        /batch of size \d+ \(\d+ request\(s\)\) sent: (filled|delay expired|no delay|preferred size reached)/.test(l),
      ),
    ).toBe(true);
  });
});
