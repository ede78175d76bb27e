import { describe, expect, it } from "vitest";
import type { LevelResult } from "./measure.js";
import { csvHeader, csvReport, networkUs, summary } from "./report.js";

const level: LevelResult = {
  level: 2,
  windows: 3,
  stable: false,
  requestCount: 300,
  durationMs: 1000,
  requestsPerSecond: 300,
  throughput: 600,
  latency: { p50: 1000.4, p90: 1500, p95: 1700, p99: 2100, average: 1100, chosen: undefined },
  latenciesUs: new Float64Array(0),
  server: {
    requestCount: 300,
    inferenceCount: 600,
    executionCount: 200,
    averageBatchSize: 3,
    requestUs: 800,
    queueUs: 100,
    computeInputUs: 10,
    computeInferUs: 600,
    computeOutputUs: 20,
    overheadUs: 70,
  },
};

describe("the CSV report", () => {
  it("has perf_analyzer's columns, blanks where nothing was measured, times in µs", () => {
    const [header, row, end] = csvReport("concurrency", [level]).split("\n");
    expect(header).toBe(
      "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input," +
        "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency," +
        "Avg latency,request/response,response wait,Avg Batch Size",
    );
    expect(row).toBe("2,600.00,,370,100,10,600,20,,1000,1500,1700,2100,1100,,,3.00");
    expect(end).toBe("");
    expect(csvHeader("request-rate")[0]).toBe("Request Rate");
    expect(networkUs(level)).toBe(370);
  });

  it("ends stdout with perf_analyzer's summary lines and a table", () => {
    const text = summary("concurrency", [level], undefined);
    expect(text).toContain("Inferences/Second vs. Client Average Batch Latency");
    expect(text).toContain("Concurrency: 2, throughput: 600.00 infer/sec, latency 1100 usec");
    expect(text).toMatch(/^2\s+600\.00\s+1000\s+1500\s+1700\s+2100\s+1100\s+100\s+10\s+600\s+20\s+370\s+3\.00\s+no$/m);
  });
});
