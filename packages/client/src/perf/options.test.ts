import { describe, expect, it } from "vitest";
import { PerfUsageError, parsePerfOptions, parseRange } from "./options.js";

describe("parseRange", () => {
  it("adds the step, as perf_analyzer does, and defaults end to start and step to 1", () => {
    expect(parseRange("--concurrency-range", "1:8:2", true)).toEqual([1, 3, 5, 7]);
    expect(parseRange("--concurrency-range", "1:4", true)).toEqual([1, 2, 3, 4]);
    expect(parseRange("--concurrency-range", "3", true)).toEqual([3]);
    expect(parseRange("--request-rate-range", "0.5:1.5:0.5", false)).toEqual([0.5, 1, 1.5]);
    expect(parseRange("--request-rate-range", "0.1:0.3:0.1", false)).toEqual([0.1, 0.2, 0.3]);
  });

  it("rejects empty parts, zeros, fractions of callers and reversed ranges", () => {
    for (const bad of ["", "1::2", "0:4", "1.5:3", "4:1", "1:2:0", "a", "1:2:3:4"]) {
      expect(() => parseRange("--concurrency-range", bad, true), bad).toThrow(PerfUsageError);
    }
  });
});

describe("parsePerfOptions", () => {
  it("has perf_analyzer's defaults", () => {
    const options = parsePerfOptions(["-m", "simple"]);
    expect(options).toMatchObject({
      model: "simple",
      version: "",
      protocol: "grpc",
      url: "http://localhost:8001",
      batchSize: 1,
      load: { kind: "concurrency", levels: [1] },
      measurementIntervalMs: 5000,
      maxTrials: 10,
      stabilityPercentage: 10,
      percentile: undefined,
      sharedMemory: "none",
      outputSharedMemorySize: 102400,
      inputData: { kind: "random" },
      reportFile: undefined,
    });
    expect(parsePerfOptions(["-m", "simple", "-i", "http"])).toMatchObject({ url: "http://localhost:8000" });
  });

  it("reads the short and long flags", () => {
    const options = parsePerfOptions([
      "-m",
      "mlp",
      "-x",
      "2",
      "-u",
      "127.0.0.1:9001/",
      "-i",
      "http",
      "-b",
      "4",
      "-p",
      "300",
      "--max-trials",
      "3",
      "-s",
      "5",
      "--percentile",
      "95",
      "--request-rate-range",
      "100:300:100",
      "--request-distribution",
      "poisson",
      "--shared-memory",
      "system",
      "--input-data",
      "data.json",
      "--shape",
      "INPUT:3,4",
      "-f",
      "out.csv",
    ]);
    expect(options).toMatchObject({
      model: "mlp",
      version: "2",
      url: "http://127.0.0.1:9001",
      protocol: "http",
      batchSize: 4,
      measurementIntervalMs: 300,
      maxTrials: 3,
      stabilityPercentage: 5,
      percentile: 95,
      load: { kind: "request-rate", levels: [100, 200, 300] },
      requestDistribution: "poisson",
      sharedMemory: "system",
      inputData: { kind: "file", path: "data.json" },
      shapes: { INPUT: [3, 4] },
      reportFile: "out.csv",
    });
    expect(parsePerfOptions(["-m", "m", "--measurement-interval", "250"])).toMatchObject({
      measurementIntervalMs: 250,
    });
    expect(parsePerfOptions(["-h"])).toBe("help");
  });

  it("says what is wrong", () => {
    const cases: [string[], string][] = [
      [[], "-m"],
      [["-m", "m", "-i", "udp"], "expected grpc or http"],
      [["-m", "m", "-b", "0"], "invalid value for -b"],
      [["-m", "m", "--shared-memory", "cuda"], "expected none or system"],
      [["-m", "m", "--concurrency-range", "1:2", "--request-rate-range", "10"], "cannot be used together"],
      [["-m", "m", "--shape", "INPUT"], "--shape"],
      [["-m", "m", "--percentile", "100"], "--percentile"],
      [["-m", "m", "--nope"], "Unknown option"],
    ];
    for (const [args, text] of cases) expect(() => parsePerfOptions(args), args.join(" ")).toThrow(text);
  });
});
