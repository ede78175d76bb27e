import { readFile } from "node:fs/promises";
import { cpus, freemem, totalmem } from "node:os";
import { Counter, Gauge, Registry } from "prom-client";
import { type HostTransferCounts, hostTransfers } from "../../base/host-transfers.js";
import { FIRST_RESPONSE_HISTOGRAM } from "../../base/latency-histogram.js";
import type { InferenceServer, ModelView } from "../../core/inference-server.js";
import type { HttpAnswer, HttpHandler } from "../transport/http-exchange.js";
import type { GpuMetrics, GpuMetricsSource } from "./gpu-metrics.js";

/** Metrics options (tritonserver's `--metrics-config`). */
export interface MetricsOptions {
  /** `counter_latencies`: the `*_duration_us` counters (default true). */
  counterLatencies?: boolean;
  /**
   * `batch_size_histogram` (Galley's, off by default): `galley_inference_batch_size`, a histogram
   * of executions by batch size, to see at a glance whether batching happens.
   */
  batchSizeHistogram?: boolean;
  /**
   * `histogram_latencies` (off by default): `nv_inference_first_response_histogram_ms` per model,
   * over Triton's default buckets or the model config's `model_metrics` ones.
   */
  histogramLatencies?: boolean;
  /** Text in Prometheus' format appended after Galley's own metrics (Python models' custom metric families). */
  extra?: () => string;
  /**
   * `--allow-gpu-metrics` (default true): `nv_gpu_*` and `nv_energy_consumption` per GPU, read
   * through NVML. Absent where there is no NVML or no GPU.
   */
  allowGpuMetrics?: boolean;
  /** `--metrics-interval-ms` (default 2000): how often the GPU metrics are sampled. */
  intervalMs?: number;
  /** `--allow-cpu-metrics` (default true): `nv_cpu_utilization` and `nv_cpu_memory_*_bytes`. */
  allowCpuMetrics?: boolean;
  /**
   * Where GPU readings come from instead of NVML (tests inject a fixed source here).
   *
   * @internal
   */
  gpuSource?: GpuMetricsSource;
}

/** `galley_tensor_transfer_bytes`' `path` label for each host-transfer counter. */
const TRANSFER_PATHS: [string, keyof HostTransferCounts][] = [
  ["host_to_device", "hostToDevice"],
  ["device_to_host", "deviceToHost"],
  ["on_device", "onDevice"],
  ["between_gpus", "betweenGpus"],
];

const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

const MODEL_COUNTERS: [string, string, (m: ModelView) => number][] = [
  [
    "nv_inference_request_success",
    "Number of successful inference requests, all batch sizes",
    (m) => m.stats.success.count,
  ],
  [
    "nv_inference_count",
    "Number of inferences performed (does not include cached requests)",
    (m) => m.stats.inferenceCount,
  ],
  [
    "nv_inference_exec_count",
    "Number of model executions performed (does not include cached requests)",
    (m) => m.stats.executionCount,
  ],
];

const LATENCY_COUNTERS: [string, string, (m: ModelView) => bigint][] = [
  [
    "nv_inference_request_duration_us",
    "Cumulative inference request duration in microseconds (includes cached requests)",
    (m) => m.stats.success.ns + m.stats.fail.ns,
  ],
  [
    "nv_inference_queue_duration_us",
    "Cumulative inference queuing duration in microseconds (includes cached requests)",
    (m) => m.stats.queue.ns,
  ],
  [
    "nv_inference_compute_input_duration_us",
    "Cumulative compute input duration in microseconds (does not include cached requests)",
    (m) => m.stats.computeInput.ns,
  ],
  [
    "nv_inference_compute_infer_duration_us",
    "Cumulative compute inference duration in microseconds (does not include cached requests)",
    (m) => m.stats.computeInfer.ns,
  ],
  [
    "nv_inference_compute_output_duration_us",
    "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    (m) => m.stats.computeOutput.ns,
  ],
];

/**
 * Prometheus metrics on :8002 with Triton's names and labels (PROTOCOL.md §7). Values are read
 * at scrape time from the same statistics the statistics extension reports, so the two never
 * disagree. `/metrics` (and `/metrics/`) answer; any other path gets 200 and an empty body, as
 * Triton's metrics port does.
 */
export function createMetricsHandler(
  server: InferenceServer,
  options: MetricsOptions = {},
  gpu?: GpuMetrics,
): HttpHandler {
  const cpu = new CpuSampler();
  const text = (status: number, body: string): HttpAnswer => ({
    status,
    headers: { "Content-Type": "text/plain; charset=utf-8" },
    parts: [Buffer.from(body)],
  });
  return (request) => {
    const path = request.target.split("?")[0];
    if (path !== "/metrics" && path !== "/metrics/") return Promise.resolve({ status: 200, headers: {}, parts: [] });
    return render(server, options, cpu, gpu).then(
      (metrics) => text(200, metrics),
      (error: unknown) => text(500, String(error)),
    );
  };
}

async function render(
  server: InferenceServer,
  options: MetricsOptions,
  cpu: CpuSampler,
  gpu: GpuMetrics | undefined,
): Promise<string> {
  const models = server.readyModels();
  // Labels: model, version, and one `_<tag>` per metric_tags entry of any model.
  const tagNames = [...new Set(models.flatMap((m) => Object.keys(m.config.metricTags).map((t) => `_${t}`)))];
  const labelNames = ["model", "version", ...tagNames];
  const labels = (m: ModelView) =>
    tritonOrder({
      model: m.name,
      version: String(m.version),
      ...Object.fromEntries(Object.entries(m.config.metricTags).map(([k, v]) => [`_${k}`, v])),
    });
  const registry = new Registry();
  for (const [name, help, value] of MODEL_COUNTERS) {
    const counter = new Counter({ name, help, labelNames, registers: [registry] });
    for (const m of models) counter.inc(labels(m), value(m));
  }
  const failure = new Counter({
    name: "nv_inference_request_failure",
    help: "Number of failed inference requests, all batch sizes",
    labelNames: [...labelNames, "reason"],
    registers: [registry],
  });
  for (const m of models) {
    for (const [reason, count] of Object.entries(m.stats.failures))
      failure.inc(tritonOrder({ ...labels(m), reason }), count);
  }
  if (options.counterLatencies ?? true) {
    for (const [name, help, value] of LATENCY_COUNTERS) {
      const counter = new Counter({ name, help, labelNames, registers: [registry] });
      for (const m of models) counter.inc(labels(m), Number(value(m) / 1000n));
    }
  }
  const pending = new Gauge({
    name: "nv_inference_pending_request_count",
    help: "Instantaneous number of pending requests awaiting execution per-model.",
    labelNames,
    registers: [registry],
  });
  for (const m of models) pending.set(labels(m), m.stats.pending);
  const load = new Gauge({
    name: "nv_model_load_duration_secs",
    help: "Model load time in seconds",
    labelNames,
    registers: [registry],
  });
  for (const m of models) load.set(labels(m), m.stats.loadSeconds);

  if (options.allowCpuMetrics ?? true) {
    new Gauge({ name: "nv_cpu_utilization", help: "CPU utilization rate [0.0 - 1.0]", registers: [registry] }).set(
      cpu.sample(),
    );
    const memory = await memoryBytes();
    new Gauge({
      name: "nv_cpu_memory_total_bytes",
      help: "CPU total memory (RAM), in bytes",
      registers: [registry],
    }).set(memory.total);
    new Gauge({ name: "nv_cpu_memory_used_bytes", help: "CPU used memory (RAM), in bytes", registers: [registry] }).set(
      memory.used,
    );
  }
  try {
    gpu?.register(registry);
  } catch {
    // A bad GPU reading must not cost the scrape its other metrics.
  }
  if (server.cache) {
    const cacheMetrics: [string, string, (m: ModelView) => number][] = [
      ["nv_cache_num_hits_per_model", "Number of cache hits per model", (m) => m.stats.cacheHit.count],
      ["nv_cache_num_misses_per_model", "Number of cache misses per model", (m) => m.stats.cacheMiss.count],
      [
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        (m) => Number(m.stats.cacheHit.ns / 1000n),
      ],
      [
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert + lookup) duration per model, in microseconds",
        (m) => Number(m.stats.cacheMiss.ns / 1000n),
      ],
    ];
    for (const [name, help, value] of cacheMetrics) {
      const gauge = new Gauge({ name, help, labelNames, registers: [registry] });
      for (const m of models.filter((x) => x.config.responseCache?.enable)) gauge.set(labels(m), value(m));
    }
  }
  memoryMetrics(server, models, registry, labelNames, labels);
  const transfers = new Counter({
    name: "galley_tensor_transfer_bytes",
    help: "Tensor bytes by path: copied host_to_device or device_to_host, or used on_device without crossing the host",
    labelNames: [...labelNames, "path"],
    registers: [registry],
  });
  // Counted by model name: every loaded version of a model shows its model's sums.
  const counted = hostTransfers.snapshot().models;
  for (const m of models) {
    const counts = counted[m.name];
    for (const [path, key] of TRANSFER_PATHS) transfers.inc(tritonOrder({ ...labels(m), path }), counts?.[key] ?? 0);
  }
  gpuExecutionMetrics(models, registry, labelNames, labels);
  const text = (await registry.metrics()) + (options.histogramLatencies ? firstResponseHistogram(models, labels) : "");
  return (options.batchSizeHistogram ? text + batchSizeHistogram(models, labels) : text) + (options.extra?.() ?? "");
}

/**
 * Galley's memory metrics: what each READY version holds (`galley_model_memory_bytes`, by `kind`
 * host or gpu, with `device` for a GPU), the budget (`galley_model_memory_budget_bytes`), and per
 * model, loads on demand and evictions so far (counters that outlive the versions they counted).
 */
function memoryMetrics(
  server: InferenceServer,
  models: readonly ModelView[],
  registry: Registry,
  labelNames: string[],
  labels: (m: ModelView) => Record<string, string>,
): void {
  const bytes = new Gauge({
    name: "galley_model_memory_bytes",
    help: "Memory a model version holds, measured across its load and warmup (host: resident set growth and its stub processes; gpu: NVML, this process' growth and its stub processes)",
    labelNames: [...labelNames, "kind", "device"],
    registers: [registry],
  });
  for (const m of models) {
    for (const usage of m.memory) {
      const kind: Record<string, string> =
        usage.type === "CPU" ? { kind: "host" } : { kind: "gpu", device: String(usage.id) };
      bytes.inc(tritonOrder({ ...labels(m), ...kind }), usage.byteSize);
    }
  }
  if (models.some((m) => (m.workingMemory?.size ?? 0) + (m.hostWorkingMemory?.size ?? 0) > 0)) {
    const working = new Gauge({
      name: "galley_model_working_memory_bytes",
      help: "The most working memory a batch of each size took beyond what was held before it: kind gpu (the PyTorch allocator's peak, or a stub's NVML figure), from warmup and every batch since; kind host (the peak resident set of the instance's process), from warmup",
      labelNames: [...labelNames, "batch_size", "kind"],
      registers: [registry],
    });
    for (const m of models) {
      for (const [kind, peaks] of [
        ["host", m.hostWorkingMemory],
        ["gpu", m.workingMemory],
      ] as const) {
        for (const [size, bytes] of peaks ?? []) {
          working.set(tritonOrder({ ...labels(m), batch_size: String(size), kind }), bytes);
        }
      }
    }
  }
  if (server.gpuMemoryAdmission()) {
    const held = new Counter({
      name: "galley_model_memory_admission_batches_total",
      help: "Batches GPU-memory admission held back (--gpu-memory-admission): outcome delayed (waited for GPU memory, once per wait), reduced (sent smaller than gathered), refused (its requests got UNAVAILABLE after --gpu-memory-wait-secs)",
      labelNames: [...labelNames, "outcome"],
      registers: [registry],
    });
    for (const m of models) {
      for (const [outcome, count] of Object.entries(m.stats.memoryAdmission))
        held.inc(tritonOrder({ ...labels(m), outcome }), count);
    }
  }
  const budget = server.memoryBudget();
  if (budget) {
    const limit = new Gauge({
      name: "galley_model_memory_budget_bytes",
      help: "--model-memory-budget: memory the loaded models may hold together",
      labelNames: ["kind", "device"],
      registers: [registry],
    });
    if (budget.host !== undefined) limit.set({ kind: "host" }, budget.host);
    for (const [device, size] of budget.gpus ?? [])
      limit.set(tritonOrder({ device: String(device), kind: "gpu" }), size);
  }
  const counters = server.memoryCounters();
  const counted: [string, string, ReadonlyMap<string, number>][] = [
    [
      "galley_model_loads_on_demand_total",
      "Loads started by an inference request (--load-on-demand)",
      counters.onDemandLoads,
    ],
    ["galley_model_evictions_total", "Models unloaded to fit --model-memory-budget", counters.evictions],
  ];
  for (const [name, help, values] of counted) {
    if (values.size === 0) continue;
    const counter = new Counter({ name, help, labelNames: ["model"], registers: [registry] });
    for (const [model, count] of values) counter.inc({ model }, count);
  }
  if (counters.waiting.size > 0) {
    const waiting = new Gauge({
      name: "galley_model_load_waiting_requests",
      help: "Requests waiting now for their model's load on demand",
      labelNames: ["model"],
      registers: [registry],
    });
    for (const [model, count] of counters.waiting) waiting.set({ model }, count);
  }
}

/**
 * Per GPU a model's instances run on (`device`: the CUDA ordinal, as in `galley_model_memory_bytes`):
 * executions, batch elements and compute time there, to see a model's batches spread over its GPUs.
 * Only for models that ran on a GPU.
 */
function gpuExecutionMetrics(
  models: readonly ModelView[],
  registry: Registry,
  labelNames: string[],
  labels: (m: ModelView) => Record<string, string>,
): void {
  if (!models.some((m) => m.stats.gpus.size > 0)) return;
  const families: [
    string,
    string,
    (g: { executionCount: number; inferenceCount: number; computeInferNs: bigint }) => number,
  ][] = [
    ["galley_gpu_execution_count", "Model executions on each GPU", (g) => g.executionCount],
    ["galley_gpu_inference_count", "Batch elements inferred on each GPU", (g) => g.inferenceCount],
    [
      "galley_gpu_compute_infer_duration_us",
      "Compute time on each GPU (microseconds)",
      (g) => Number(g.computeInferNs / 1000n),
    ],
  ];
  for (const [name, help, value] of families) {
    const counter = new Counter({ name, help, labelNames: [...labelNames, "device"], registers: [registry] });
    for (const m of models) {
      for (const [device, gpu] of m.stats.gpus)
        counter.inc(tritonOrder({ ...labels(m), device: String(device) }), value(gpu));
    }
  }
}

/**
 * Labels in the order Triton exports them: by name (prometheus-cpp keeps a metric's labels in a
 * `std::map`), so `_<tag>` labels come first and `reason` before `version`. The exporter writes an
 * object's labels in its key order.
 */
export function tritonOrder(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

const escapeLabel = (value: string) => value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
const labelText = (l: Record<string, string>) =>
  Object.entries(l)
    .map(([k, v]) => `${k}="${escapeLabel(v)}"`)
    .join(",");

/**
 * `nv_inference_first_response_histogram_ms`, Triton's one latency histogram, from each version's
 * own buckets (written out: prom-client's histograms share one set of buckets per family, Triton's
 * differ per model through `model_metrics`). Versions loaded without it have no series.
 */
function firstResponseHistogram(models: ModelView[], labels: (m: ModelView) => Record<string, string>): string {
  const lines = [
    `# HELP ${FIRST_RESPONSE_HISTOGRAM} Duration from request to first response in milliseconds`,
    `# TYPE ${FIRST_RESPONSE_HISTOGRAM} histogram`,
  ];
  for (const m of models) {
    const histogram = m.stats.firstResponse;
    if (!histogram) continue;
    const base = labels(m);
    let within = 0;
    for (const [i, le] of histogram.bounds.entries()) {
      within += histogram.counts[i] ?? 0;
      lines.push(`${FIRST_RESPONSE_HISTOGRAM}_bucket{${labelText({ ...base, le: String(le) })}} ${within}`);
    }
    lines.push(`${FIRST_RESPONSE_HISTOGRAM}_bucket{${labelText({ ...base, le: "+Inf" })}} ${histogram.count}`);
    lines.push(`${FIRST_RESPONSE_HISTOGRAM}_sum{${labelText(base)}} ${histogram.sum}`);
    lines.push(`${FIRST_RESPONSE_HISTOGRAM}_count{${labelText(base)}} ${histogram.count}`);
  }
  return `${lines.join("\n")}\n`;
}

/**
 * `galley_inference_batch_size`: executions by batch size, from the same per-size counts as the
 * statistics' `batch_stats` (written out directly: the counts exist already, nothing is observed twice).
 */
function batchSizeHistogram(models: ModelView[], labels: (m: ModelView) => Record<string, string>): string {
  const lines = [
    "# HELP galley_inference_batch_size Model executions by batch size (from batch_stats)",
    "# TYPE galley_inference_batch_size histogram",
  ];
  for (const m of models) {
    const sizes = [...m.stats.batches].map(([size, b]) => [size, b.computeInfer.count] as const);
    const base = labels(m);
    let sum = 0;
    let count = 0;
    for (const [size, n] of sizes) {
      sum += size * n;
      count += n;
    }
    for (const le of BATCH_BUCKETS) {
      const within = sizes.filter(([size]) => size <= le).reduce((a, [, n]) => a + n, 0);
      lines.push(`galley_inference_batch_size_bucket{${labelText({ ...base, le: String(le) })}} ${within}`);
    }
    lines.push(`galley_inference_batch_size_bucket{${labelText({ ...base, le: "+Inf" })}} ${count}`);
    lines.push(`galley_inference_batch_size_sum{${labelText(base)}} ${sum}`);
    lines.push(`galley_inference_batch_size_count{${labelText(base)}} ${count}`);
  }
  return `${lines.join("\n")}\n`;
}

/** CPU utilization between two scrapes, from the kernel's per-CPU times. */
class CpuSampler {
  #last = totals();

  sample(): number {
    const now = totals();
    const busy = now.busy - this.#last.busy;
    const all = now.all - this.#last.all;
    this.#last = now;
    return all > 0 ? busy / all : 0;
  }
}

function totals(): { busy: number; all: number } {
  let busy = 0;
  let all = 0;
  for (const { times } of cpus()) {
    const total = times.user + times.nice + times.sys + times.idle + times.irq;
    all += total;
    busy += total - times.idle;
  }
  return { busy, all };
}

/** Total and used memory as Triton computes them (MemTotal − MemAvailable), from /proc/meminfo where it exists. */
async function memoryBytes(): Promise<{ total: number; used: number }> {
  const text = await readFile("/proc/meminfo", "utf8").catch(() => "");
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? Number.NaN) * 1024;
  const total = field("MemTotal");
  const available = field("MemAvailable");
  if (Number.isFinite(total) && Number.isFinite(available)) return { total, used: total - available };
  return { total: totalmem(), used: totalmem() - freemem() };
}
