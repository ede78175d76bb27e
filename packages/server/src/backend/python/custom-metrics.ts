import type { MetricOp } from "./python-messages.js";

type Kind = "counter" | "gauge" | "histogram";

interface Metric {
  labels: Record<string, string>;
  value: number;
  /** A histogram's upper bounds (ascending), its count per bucket (not cumulative), sum and count. */
  buckets?: number[];
  counts?: number[];
  sum?: number;
  count?: number;
  /** The stubs' `Metric` objects over it (Triton counts a prometheus metric's references): it goes at 0. */
  refs: number;
}

interface Family {
  description: string;
  kind: Kind;
  /** Values by their labels' key (sorted JSON). */
  metrics: Map<string, Metric>;
  /** The instances that declared it, each with its live `MetricFamily` objects; the family goes when the last one does. */
  owners: Map<string, number>;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/**
 * Custom metric families of Python models (`pb_utils.MetricFamily`: counters, gauges and
 * histograms), shown on the metrics endpoint after Galley's own. A family lives while an instance
 * that declared it is up.
 */
export class CustomMetrics {
  readonly #families = new Map<string, Family>();

  /** Apply one operation from the instance `owner`; returns a metric's value for `value`. */
  apply(owner: string, request: MetricOp): number | undefined {
    if (request.op === "family") {
      if (!NAME.test(request.family)) throw new Error(`invalid metric family name '${request.family}'`);
      if (request.family.startsWith("nv_")) {
        throw new Error(`metric family '${request.family}': the prefix 'nv_' is reserved for the server's metrics`);
      }
      const existing = this.#families.get(request.family);
      if (existing && existing.kind !== request.kind) {
        throw new Error(`metric family '${request.family}' already exists as a ${existing.kind}`);
      }
      const family = existing ?? {
        description: request.description,
        kind: request.kind,
        metrics: new Map(),
        owners: new Map<string, number>(),
      };
      family.owners.set(owner, (family.owners.get(owner) ?? 0) + 1);
      this.#families.set(request.family, family);
      return undefined;
    }
    const family = this.#families.get(request.family);
    if (!family) throw new Error(`metric family '${request.family}' does not exist`);
    if (request.op === "family-delete") {
      // One `MetricFamily` object of this instance went away (its metrics were deleted first).
      const left = (family.owners.get(owner) ?? 1) - 1;
      if (left > 0) family.owners.set(owner, left);
      else family.owners.delete(owner);
      if (family.owners.size === 0) this.#families.delete(request.family);
      return undefined;
    }
    for (const name of Object.keys(request.labels)) {
      if (!LABEL.test(name)) throw new Error(`invalid metric label name '${name}'`);
      if (family.kind === "histogram" && name === "le") throw new Error("a histogram's label cannot be named 'le'");
    }
    // Labels in Triton's order (a std::map's: by name), which is also how it exports them.
    const labels = Object.fromEntries(
      Object.entries(request.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
    ) as Record<string, string>;
    const key = JSON.stringify(Object.entries(labels));
    let metric = family.metrics.get(key);
    if (request.op === "metric-delete") {
      // One `Metric` object went away (its family was deleted): the metric goes with its last one.
      if (metric && --metric.refs <= 0) family.metrics.delete(key);
      return undefined;
    }
    if (!metric) {
      metric = { labels, value: 0, refs: 0 };
      if (family.kind === "histogram") {
        const buckets = request.op === "metric" ? request.buckets : undefined;
        if (!buckets) throw new Error("Missing required buckets.");
        // prometheus-cpp's check (Triton's histograms), in its words: strictly ascending bounds.
        if (buckets.some((bound, i) => i > 0 && bound <= (buckets[i - 1] as number))) {
          throw new Error("Bucket Boundaries must be strictly sorted");
        }
        Object.assign(metric, { buckets: [...buckets], counts: buckets.map(() => 0), sum: 0, count: 0 });
      }
      family.metrics.set(key, metric);
    }
    switch (request.op) {
      case "metric":
        if (request.buckets && family.kind !== "histogram") throw new Error("Unexpected buckets found.");
        metric.refs += 1;
        return undefined;
      case "increment":
        if (family.kind === "histogram") throw new Error("a histogram can only be observed");
        if (family.kind === "counter" && request.value < 0) throw new Error("a counter cannot decrease");
        metric.value += request.value;
        return undefined;
      case "set":
        if (family.kind !== "gauge") throw new Error(`a ${family.kind} cannot be set`);
        metric.value = request.value;
        return undefined;
      case "observe": {
        if (family.kind !== "histogram") throw new Error(`a ${family.kind} cannot observe values`);
        const at = metric.buckets?.findIndex((bound) => request.value <= bound) ?? -1;
        if (at >= 0 && metric.counts) metric.counts[at] = (metric.counts[at] ?? 0) + 1;
        metric.sum = (metric.sum ?? 0) + request.value;
        metric.count = (metric.count ?? 0) + 1;
        return undefined;
      }
      case "value":
        if (family.kind === "histogram") throw new Error("a histogram has no single value");
        return metric.value;
    }
  }

  /** An instance went away: the families only it declared go too. */
  dropOwner(owner: string): void {
    for (const [name, family] of this.#families) {
      family.owners.delete(owner);
      if (family.owners.size === 0) this.#families.delete(name);
    }
  }

  /** The families in Prometheus' text format ('' when there are none); labels by name, `le` last, as Triton. */
  render(): string {
    const lines: string[] = [];
    const escapeLabel = (v: string) => v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
    const labelText = (labels: Record<string, string>) => {
      const text = Object.entries(labels)
        .map(([k, v]) => `${k}="${escapeLabel(v)}"`)
        .join(",");
      return text ? `{${text}}` : "";
    };
    for (const [name, family] of this.#families) {
      lines.push(`# HELP ${name} ${family.description.replaceAll("\\", "\\\\").replaceAll("\n", "\\n")}`);
      lines.push(`# TYPE ${name} ${family.kind}`);
      for (const metric of family.metrics.values()) {
        if (family.kind !== "histogram") {
          lines.push(`${name}${labelText(metric.labels)} ${metric.value}`);
          continue;
        }
        let cumulative = 0;
        for (const [i, bound] of (metric.buckets ?? []).entries()) {
          cumulative += metric.counts?.[i] ?? 0;
          lines.push(`${name}_bucket${labelText({ ...metric.labels, le: String(bound) })} ${cumulative}`);
        }
        lines.push(`${name}_bucket${labelText({ ...metric.labels, le: "+Inf" })} ${metric.count ?? 0}`);
        lines.push(`${name}_sum${labelText(metric.labels)} ${metric.sum ?? 0}`);
        lines.push(`${name}_count${labelText(metric.labels)} ${metric.count ?? 0}`);
      }
    }
    return lines.length > 0 ? `${lines.join("\n")}\n` : "";
  }
}
