import { describe, expect, it } from "vitest";
import { CustomMetrics } from "./custom-metrics.js";

describe("CustomMetrics", () => {
  it("refuses histogram buckets that are not strictly ascending, in prometheus-cpp's words", () => {
    const m = new CustomMetrics();
    m.apply("i", { op: "family", family: "h", description: "d", kind: "histogram" });
    for (const buckets of [
      [2.5, 0.1, 1, 10, 5],
      [1, 1, 2, 5, 5],
    ]) {
      expect(() => m.apply("i", { op: "metric", family: "h", labels: {}, buckets })).toThrow(
        /^Bucket Boundaries must be strictly sorted$/,
      );
    }
    m.apply("i", { op: "metric", family: "h", labels: {}, buckets: [] });
    expect(m.render()).toContain('h_bucket{le="+Inf"} 0\n');
  });

  it("exports labels by name, `le` last, as Triton", () => {
    const m = new CustomMetrics();
    m.apply("i", { op: "family", family: "h", description: "d", kind: "histogram" });
    m.apply("i", { op: "metric", family: "h", labels: { zeta: "z", alpha: "a" }, buckets: [1] });
    m.apply("i", { op: "observe", family: "h", labels: { alpha: "a", zeta: "z" }, value: 0.5 });
    expect(m.render()).toContain('h_bucket{alpha="a",zeta="z",le="1"} 1\n');
    expect(m.render()).toContain('h_count{alpha="a",zeta="z"} 1\n');
  });

  it("deletes a metric with its last Metric object, and a family with its last MetricFamily object", () => {
    const m = new CustomMetrics();
    const family = { op: "family", family: "g", description: "d", kind: "gauge" } as const;
    const metric = { op: "metric", family: "g", labels: { a: "1" } } as const;
    // Two MetricFamily objects of one instance, each with a Metric over the same labels.
    m.apply("i", family);
    m.apply("i", family);
    m.apply("i", metric);
    m.apply("i", metric);
    m.apply("i", { op: "set", family: "g", labels: { a: "1" }, value: 3 });
    m.apply("i", { op: "metric-delete", family: "g", labels: { a: "1" } });
    m.apply("i", { op: "family-delete", family: "g" });
    expect(m.render()).toContain('g{a="1"} 3\n');
    m.apply("i", { op: "metric-delete", family: "g", labels: { a: "1" } });
    expect(m.render()).toBe("# HELP g d\n# TYPE g gauge\n");
    m.apply("i", { op: "family-delete", family: "g" });
    expect(m.render()).toBe("");
    // Gone from the server: the name may be declared again, as another kind.
    m.apply("i", { op: "family", family: "g", description: "d", kind: "counter" });
    expect(m.render()).toContain("# TYPE g counter");
  });
});
