import { describe, expect, it } from "vitest";
import { escapeXml, renderChart, ticks } from "./chart.js";
import type { LevelResult } from "./measure.js";

function result(level: number, throughput: number, p50: number, p99: number, batch: number): LevelResult {
  return {
    level,
    windows: 3,
    stable: true,
    requestCount: 100,
    durationMs: 1000,
    requestsPerSecond: throughput,
    throughput,
    latency: { p50, p90: p99, p95: p99, p99, average: p50, chosen: undefined },
    latenciesUs: new Float64Array(0),
    server: {
      requestCount: 100,
      inferenceCount: 100,
      executionCount: Math.round(100 / batch),
      averageBatchSize: batch,
      requestUs: 0,
      queueUs: 0,
      computeInputUs: 0,
      computeInferUs: 0,
      computeOutputUs: 0,
      overheadUs: 0,
    },
  };
}

describe("ticks", () => {
  it("steps by 1, 2 or 5 times a power of ten up to the maximum", () => {
    expect(ticks(9)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(ticks(1234)).toEqual([0, 500, 1000, 1500]);
    expect(ticks(0.3)).toEqual([0, 0.1, 0.2, 0.3]);
    expect(ticks(0)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
  });
});

describe("renderChart", () => {
  it("draws both panels with one point per level", () => {
    const svg = renderChart("m<&>", "concurrency", [
      result(1, 100, 900, 1500, 1),
      result(2, 180, 1100, 2500, 1.6),
      result(4, 300, 1400, 4000, 3.2),
    ]);
    expect(svg.startsWith("<svg ")).toBe(true);
    expect(svg.trim().endsWith("</svg>")).toBe(true);
    const polylines = [...svg.matchAll(/<polyline class="(\w+)"[^>]* points="([^"]*)"\/>/g)];
    expect(polylines.map((m) => m[1])).toEqual(["p50", "p99", "throughput"]);
    for (const m of polylines) expect(m[2]?.split(" ")).toHaveLength(3);
    expect(svg).toContain("m&#60;&#38;&#62;");
    expect(svg).not.toContain("NaN");
  });

  it("copes with one level and with zeros", () => {
    const svg = renderChart("m", "request-rate", [result(10, 0, 0, 0, 0)]);
    expect(svg).not.toContain("NaN");
    expect(svg).not.toContain("Infinity");
    expect(escapeXml(`"'`)).toBe("&#34;&#39;");
  });
});
