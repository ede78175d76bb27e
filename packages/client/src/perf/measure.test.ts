import { describe, expect, it } from "vitest";
import { closedLoop } from "./load.js";
import { isStable, type Measurement, measureLevel, measurement, merge, percentile, summarize } from "./measure.js";
import { difference, type StatsSnapshot } from "./server-stats.js";

const none = difference(snapshot(0), snapshot(0));

function snapshot(requests: number, batch = 1): StatsSnapshot {
  return {
    successCount: requests,
    successNs: BigInt(requests) * 1_000_000n,
    queueNs: BigInt(requests) * 100_000n,
    computeInputNs: BigInt(requests) * 10_000n,
    computeInferNs: BigInt(requests) * 500_000n,
    computeOutputNs: BigInt(requests) * 20_000n,
    computeCount: requests,
    inferenceCount: requests,
    executionCount: Math.ceil(requests / batch),
  };
}

function window(throughput: number, latencyUs: number): Measurement {
  const records = Array.from({ length: throughput }, (_, i) => ({ start: i, end: i + latencyUs / 1000 }));
  return measurement(records, 1000, 1, none);
}

describe("percentile", () => {
  it("takes the nearest rank", () => {
    const sorted = Float64Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(sorted, 50)).toBe(50);
    expect(percentile(sorted, 99)).toBe(99);
    expect(percentile(sorted, 100)).toBe(100);
    expect(percentile(Float64Array.of(7), 99)).toBe(7);
    expect(percentile(new Float64Array(0), 50)).toBe(0);
  });

  it("summarises unsorted latencies", () => {
    const latency = summarize(Float64Array.of(5, 1, 4, 2, 3), 80);
    expect(latency).toEqual({ p50: 3, p90: 5, p95: 5, p99: 5, average: 3, chosen: 4 });
  });
});

describe("stability", () => {
  it("needs three windows within the percentage in throughput and latency", () => {
    expect(isStable([window(100, 1000), window(100, 1000)], 10)).toBe(false);
    expect(isStable([window(50, 9000), window(100, 1000), window(105, 1050), window(96, 990)], 10)).toBe(true);
    expect(isStable([window(100, 1000), window(130, 1000), window(100, 1000)], 10)).toBe(false);
    expect(isStable([window(100, 1000), window(100, 1300), window(100, 1000)], 10)).toBe(false);
    expect(isStable([window(100, 1000), window(100, 1300), window(100, 1000)], 20)).toBe(true);
    expect(isStable([window(0, 0), window(0, 0), window(0, 0)], 10)).toBe(false);
  });

  it("merges windows by pooling their latencies", () => {
    const merged = merge([window(100, 1000), window(300, 3000)], 2);
    expect(merged.requestCount).toBe(400);
    expect(merged.requestsPerSecond).toBe(200);
    expect(merged.throughput).toBe(400);
    expect(merged.latency.p50).toBeCloseTo(3000);
    expect(merged.latency.average).toBeCloseTo(2500);
  });
});

describe("difference of statistics", () => {
  it("gives per-request averages in µs and the batches formed", () => {
    const d = difference(snapshot(10, 2), snapshot(30, 2));
    expect(d).toMatchObject({ requestCount: 20, executionCount: 10, inferenceCount: 20, averageBatchSize: 2 });
    expect(d.requestUs).toBeCloseTo(1000);
    expect(d.queueUs).toBeCloseTo(100);
    expect(d.computeInferUs).toBeCloseTo(500);
    expect(d.overheadUs).toBeCloseTo(1000 - 100 - 10 - 500 - 20);
    expect(none.averageBatchSize).toBe(0);
  });
});

describe("measureLevel", () => {
  it("stops at the first stable three windows and reports them merged", async () => {
    let served = 0;
    const load = closedLoop(2, async () => {
      served++;
      await new Promise((resolve) => setImmediate(resolve));
    });
    const seen: number[] = [];
    try {
      const result = await measureLevel(load, {
        level: 2,
        batchSize: 1,
        measurementIntervalMs: 30,
        maxTrials: 4,
        stabilityPercentage: 1000,
        percentile: undefined,
        snapshot: async () => snapshot(served),
        onWindow: (_, trial) => seen.push(trial),
      });
      expect(seen).toEqual([1, 2, 3]);
      expect(result).toMatchObject({ level: 2, windows: 3, stable: true });
      expect(result.requestCount).toBeGreaterThan(0);
      expect(result.server.requestCount).toBeGreaterThan(0);
    } finally {
      await load.stop();
    }
  });

  it("throws the load's first failure", async () => {
    const load = closedLoop(1, async () => {
      throw new Error("boom");
    });
    await expect(
      measureLevel(load, {
        level: 1,
        batchSize: 1,
        measurementIntervalMs: 5,
        maxTrials: 3,
        stabilityPercentage: 10,
        percentile: undefined,
        snapshot: async () => snapshot(0),
      }),
    ).rejects.toThrow("boom");
    await load.stop();
  });
});
