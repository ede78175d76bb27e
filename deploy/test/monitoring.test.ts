import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { adapterRules, deployDir, loadManifests, loadYaml } from "./deploy-files.js";
import { exportedMetricNames } from "./galley-metrics.js";
import { parsePromql } from "./promql.js";

/** Series Prometheus makes itself for every target, usable next to Galley's. */
const PROMETHEUS_SERIES = new Set(["up"]);

let exported: Set<string>;
beforeAll(async () => {
  exported = await exportedMetricNames();
});

/** Parse `expression` as PromQL; return what is wrong with it (syntax, metrics Galley lacks). */
function problems(expression: string): string[] {
  const { errors, metrics } = parsePromql(expression);
  const unknown = metrics.filter((m) => !exported.has(m) && !PROMETHEUS_SERIES.has(m));
  return [...errors, ...unknown.map((m) => `${m} is not a metric Galley exports`)];
}

describe("Galley's exported metrics", () => {
  it("include the Triton families the dashboard and alerts are built on", () => {
    for (const name of [
      "nv_inference_request_success",
      "nv_inference_request_failure",
      "nv_inference_count",
      "nv_inference_exec_count",
      "nv_inference_queue_duration_us",
      "nv_inference_compute_infer_duration_us",
      "nv_inference_pending_request_count",
      "nv_inference_first_response_histogram_ms_bucket",
      "nv_cache_num_hits_per_model",
      "nv_cpu_utilization",
      "nv_gpu_utilization",
      "nv_gpu_memory_total_bytes",
      "nv_gpu_memory_used_bytes",
      "nv_gpu_power_usage",
      "nv_gpu_power_limit",
      "nv_energy_consumption",
    ]) {
      expect(exported).toContain(name);
    }
  });

  it("are checked for real: an unknown name and a syntax error are caught", () => {
    expect(problems("rate(nv_inference_queue_duration_seconds[5m])")).toEqual([
      "nv_inference_queue_duration_seconds is not a metric Galley exports",
    ]);
    expect(problems("sum(rate(nv_inference_count[5m])").length).toBeGreaterThan(0);
  });
});

interface Target {
  expr: string;
  refId: string;
  datasource?: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Target[];
  panels?: Panel[];
}
interface Dashboard {
  title: string;
  uid: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { type: string; name: string; query: string | { query: string } }[] };
}

describe("Grafana dashboard", () => {
  const dashboard = JSON.parse(readFileSync(join(deployDir, "grafana/galley-dashboard.json"), "utf8")) as Dashboard;
  const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const graphs = panels.filter((p) => p.type !== "row");
  const targets = graphs.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, ...t })));

  it("is a dashboard model Grafana imports", () => {
    expect(dashboard.title).toBe("Galley");
    expect(dashboard.uid).toMatch(/^[a-zA-Z0-9_-]{1,40}$/);
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    for (const p of panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      expect(p.gridPos.h, p.title).toBeGreaterThan(0);
    }
  });

  it("queries Prometheus through its datasource variable", () => {
    const variables = dashboard.templating.list;
    expect(variables.find((v) => v.name === "datasource")).toMatchObject({ type: "datasource", query: "prometheus" });
    for (const p of graphs) {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a Grafana variable, not a template
      expect(p.datasource, p.title).toEqual({ type: "prometheus", uid: "${datasource}" });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      const refIds = (p.targets ?? []).map((t) => t.refId);
      expect(new Set(refIds).size, p.title).toBe(refIds.length);
    }
  });

  it("has only PromQL that parses and names metrics Galley exports", () => {
    for (const t of targets) expect(problems(t.expr), `${t.panel} ${t.refId}: ${t.expr}`).toEqual([]);
    for (const v of dashboard.templating.list.filter((x) => x.type === "query")) {
      const query = typeof v.query === "string" ? v.query : v.query.query;
      const metric = /^label_values\((\w+),\s*\w+\)$/.exec(query)?.[1];
      expect(metric && exported.has(metric), `variable ${v.name}: ${query}`).toBe(true);
    }
  });

  it("shows throughput, queue and compute latency, batch size, failures, cache, pending, CPU and memory", () => {
    const used = new Set(targets.flatMap((t) => parsePromql(t.expr).metrics));
    for (const name of [
      "nv_inference_request_success",
      "nv_inference_count",
      "nv_inference_exec_count",
      "nv_inference_queue_duration_us",
      "nv_inference_compute_infer_duration_us",
      "nv_inference_request_failure",
      "nv_cache_num_hits_per_model",
      "nv_cache_num_misses_per_model",
      "nv_inference_pending_request_count",
      "nv_cpu_utilization",
      "nv_cpu_memory_used_bytes",
    ]) {
      expect(used, name).toContain(name);
    }
    const batch = targets.find((t) => t.panel === "Average batch size")?.expr.replace(/\s+/g, " ");
    expect(batch).toMatch(
      /rate\(nv_inference_count\{.*\}\[.*\]\)\) \/ sum by \(model\) \(rate\(nv_inference_exec_count/,
    );
  });
});

describe("Grafana dashboard: first-response quantiles", () => {
  const dashboard = JSON.parse(readFileSync(join(deployDir, "grafana/galley-dashboard.json"), "utf8")) as Dashboard;
  const panel = dashboard.panels.find((p) => p.title === "Time to first response: p50, p95, p99");

  it("shows p50, p95 and p99 per model from Triton's first-response histogram buckets, in ms", () => {
    const exprs = (panel?.targets ?? []).map((t) => t.expr);
    expect(exprs).toHaveLength(3);
    ["0.5", "0.95", "0.99"].forEach((q, i) => {
      expect(exprs[i]).toBe(
        `histogram_quantile(${q}, sum by (model, le) (rate(nv_inference_first_response_histogram_ms_bucket{model=~"$model",instance=~"$instance"}[$__rate_interval])))`,
      );
      expect(problems(exprs[i] ?? "")).toEqual([]);
    });
    expect((panel as unknown as { fieldConfig: { defaults: { unit: string } } }).fieldConfig.defaults.unit).toBe("ms");
  });
});

describe("Grafana dashboard: GPU panels", () => {
  const dashboard = JSON.parse(readFileSync(join(deployDir, "grafana/galley-dashboard.json"), "utf8")) as Dashboard;
  const graphs = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== "row");
  const uses = (title: string) => (graphs.find((p) => p.title === title)?.targets ?? []).map((t) => t.expr);

  it("show utilisation, memory used against total, power against limit and the energy rate, per gpu_uuid", () => {
    const expected: [string, RegExp[]][] = [
      ["GPU utilization", [/nv_gpu_utilization/]],
      ["GPU memory", [/nv_gpu_memory_used_bytes/, /nv_gpu_memory_total_bytes/]],
      ["GPU power vs limit", [/nv_gpu_power_usage/, /nv_gpu_power_limit/]],
      ["GPU energy rate", [/rate\(nv_energy_consumption\{.*\}\[\$__rate_interval\]\)/]],
    ];
    for (const [title, patterns] of expected) {
      const exprs = uses(title);
      expect(exprs.length, title).toBe(patterns.length);
      patterns.forEach((pattern, i) => {
        expect(exprs[i], title).toMatch(pattern);
        expect(exprs[i], title).toMatch(/by \(instance, gpu_uuid\)/);
      });
    }
  });

  it("show the tensor bytes that crossed between host and GPU, per model and path", () => {
    expect(uses("Tensor bytes across the host, by model")).toEqual([
      expect.stringMatching(
        /^sum by \(model, path\) \(rate\(galley_tensor_transfer_bytes\{.*\}\[\$__rate_interval\]\)\)$/,
      ),
    ]);
  });
});

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

describe("Prometheus alert rules", () => {
  const file = loadYaml("prometheus/galley-alerts.yaml") as { groups: { name: string; rules: Rule[] }[] };
  const rules = file.groups.flatMap((g) => g.rules);
  const alert = (name: string) => rules.find((r) => r.alert === name);

  it("are a Prometheus rule file: named groups of rules with the required fields", () => {
    expect(file.groups.length).toBeGreaterThan(0);
    expect(new Set(file.groups.map((g) => g.name)).size).toBe(file.groups.length);
    for (const rule of rules) {
      const name = rule.alert ?? rule.record ?? "";
      expect(name).toMatch(rule.alert ? /^Galley[A-Z][A-Za-z]+$/ : /^[a-z_:]+$/);
      expect(
        Object.keys(rule).every((k) => ["alert", "record", "expr", "for", "labels", "annotations"].includes(k)),
      ).toBe(true);
      if (rule.for) expect(rule.for, name).toMatch(/^([0-9]+(ms|s|m|h|d|w|y))+$/);
      if (rule.alert) {
        expect(["critical", "warning", "info"], name).toContain(rule.labels?.severity);
        expect(rule.annotations?.summary, name).toBeTruthy();
        expect(rule.annotations?.description, name).toBeTruthy();
      }
    }
    const alerts = rules.map((r) => r.alert).filter(Boolean);
    expect(new Set(alerts).size).toBe(alerts.length);
  });

  it("have only PromQL that parses and names metrics Galley exports", () => {
    for (const rule of rules) expect(problems(rule.expr), `${rule.alert}: ${rule.expr}`).toEqual([]);
  });

  it("include the usual Triton rules with their thresholds", () => {
    const queue = alert("GalleyQueueTimeHigh");
    expect(queue?.for).toBe("5m");
    expect(queue?.expr).toMatch(
      /rate\(nv_inference_queue_duration_us\[5m\]\)[\s\S]*\/[\s\S]*nv_inference_request_success[\s\S]*> 50000/,
    );
    expect(alert("GalleyFailureRateHigh")?.expr).toMatch(/nv_inference_request_failure[\s\S]*> 0\.01/);
    expect(alert("GalleyLowUtilization")?.expr).toMatch(
      /nv_cpu_utilization[\s\S]*and on[\s\S]*rate\(nv_inference_request_success/,
    );
    expect(alert("GalleyBatchSizeLow")?.expr).toMatch(
      /nv_inference_count[\s\S]*\/[\s\S]*nv_inference_exec_count[\s\S]*< 1\.25/,
    );
  });
});

describe("prometheus-adapter rule for the HPA", () => {
  const rules = adapterRules(loadManifests("kubernetes"));

  it("has PromQL that parses and names metrics Galley exports", () => {
    expect(rules.length).toBeGreaterThan(0);
    for (const rule of rules) {
      expect(problems(rule.seriesQuery), rule.seriesQuery).toEqual([]);
      expect(problems(rule.metricsQuery), rule.metricsQuery).toEqual([]);
      expect(new RegExp(rule.name.matches).test(parsePromql(rule.seriesQuery).metrics[0] ?? "")).toBe(true);
    }
  });

  it("maps the namespace and pod labels the PodMonitor adds to Kubernetes resources", () => {
    for (const rule of rules) {
      expect(rule.resources.overrides).toEqual({ namespace: { resource: "namespace" }, pod: { resource: "pod" } });
    }
  });
});
