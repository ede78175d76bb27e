import { describe, expect, it } from "vitest";
import { FIRST_RESPONSE_BUCKETS, LatencyHistogram } from "./latency-histogram.js";
import { ModelStatistics } from "./statistics.js";

describe("LatencyHistogram", () => {
  it("puts a value equal to a bound in that bound's bucket (le), larger ones in +Inf", () => {
    const h = new LatencyHistogram(FIRST_RESPONSE_BUCKETS);
    for (const v of [0, 100, 101, 500, 4999, 5000, 5001, 60000]) h.observe(v);
    expect(h.counts).toEqual([2, 2, 0, 2, 2]);
    expect(h.count).toBe(8);
    expect(h.sum).toBe(0 + 100 + 101 + 500 + 4999 + 5000 + 5001 + 60000);
  });

  it("sorts the bounds and drops repeats, as a config may list them in any order", () => {
    expect(new LatencyHistogram([10, 1, 10, 0.5]).bounds).toEqual([0.5, 1, 10]);
  });
});

describe("ModelStatistics.recordFirstResponse", () => {
  it("observes whole milliseconds, truncated, and nothing without a histogram", () => {
    const stats = new ModelStatistics([1, 2]);
    stats.recordFirstResponse(1_999_999n);
    stats.recordFirstResponse(2_000_000n);
    stats.recordFirstResponse(2_500_000n);
    expect(stats.firstResponse?.counts).toEqual([1, 2, 0]);
    expect(stats.firstResponse?.sum).toBe(5);
    const off = new ModelStatistics();
    off.recordFirstResponse(5_000_000n);
    expect(off.firstResponse).toBeUndefined();
  });
});
