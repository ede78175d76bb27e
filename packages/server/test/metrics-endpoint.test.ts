// Prometheus metrics on the metrics port (PROTOCOL.md §7): Triton's metric names, labels and
// types after real inferences, the same numbers as the statistics extension (§8), metric_tags as
// `_<tag>` labels, labels in Triton's order, counter_latencies=false, and the port's other paths.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { hostTransfers } from "../src/base/host-transfers.js";
import {
  cleanup,
  expectGrpcError,
  fp32Bytes,
  type InferenceClient,
  int32Bytes,
  range,
  simpleRequest,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";
import { findSamples as find, scrape, sampleValue as value } from "./support/metrics.js";

afterEach(cleanup);

const SIMPLE = { model: "simple", version: "1" };
const COUNTERS = [
  "nv_inference_request_success",
  "nv_inference_request_failure",
  "nv_inference_count",
  "nv_inference_exec_count",
];
const LATENCIES = [
  "nv_inference_request_duration_us",
  "nv_inference_queue_duration_us",
  "nv_inference_compute_input_duration_us",
  "nv_inference_compute_infer_duration_us",
  "nv_inference_compute_output_duration_us",
];

/** Four successful requests (batch 1, 1, 1, 2 = 5 inferences) and one that fails validation. */
async function someInferences(client: InferenceClient): Promise<void> {
  const a = range(16);
  for (let i = 0; i < 3; i++) await client.modelInfer(simpleRequest(a, a));
  await client.modelInfer(simpleRequest([...a, ...a], [...a, ...a]));
  const request = simpleRequest(a, a);
  await expectGrpcError(
    client.modelInfer({ ...request, inputs: request.inputs.slice(0, 1), rawInputContents: [int32Bytes(a)] }),
    Code.InvalidArgument,
  );
}

describe("/metrics", () => {
  it("serves Triton's per-model counters and gauges with model and version labels", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: true,
      controlMode: "explicit",
      loadModels: ["simple", "mlp_classifier"],
    });
    await someInferences(client);
    const s = await scrape(metricsUrl);

    for (const name of [...COUNTERS, ...LATENCIES]) expect(s.types.get(name), name).toBe("counter");
    for (const name of [
      "nv_inference_pending_request_count",
      "nv_model_load_duration_secs",
      "nv_cpu_utilization",
      "nv_cpu_memory_total_bytes",
      "nv_cpu_memory_used_bytes",
    ]) {
      expect(s.types.get(name), name).toBe("gauge");
    }

    expect(value(s, "nv_inference_request_success", SIMPLE)).toBe(4);
    expect(value(s, "nv_inference_count", SIMPLE)).toBe(5);
    expect(value(s, "nv_inference_exec_count", SIMPLE)).toBe(4);
    // One failure, counted under reason OTHER (a request Triton's core rejects is not REJECTED:
    // that reason is for a full queue).
    expect(value(s, "nv_inference_request_failure", { ...SIMPLE, reason: "OTHER" })).toBe(1);
    for (const reason of ["REJECTED", "CANCELED", "BACKEND"]) {
      expect(find(s, "nv_inference_request_failure", { ...SIMPLE, reason }).every((x) => x.value === 0)).toBe(true);
    }
    expect(value(s, "nv_inference_request_duration_us", SIMPLE)).toBeGreaterThan(0);
    expect(value(s, "nv_inference_compute_infer_duration_us", SIMPLE)).toBeGreaterThan(0);
    for (const name of LATENCIES) expect(value(s, name, SIMPLE)).toBeGreaterThanOrEqual(0);
    expect(value(s, "nv_inference_pending_request_count", SIMPLE)).toBe(0);
    expect(value(s, "nv_model_load_duration_secs", SIMPLE)).toBeGreaterThan(0);

    // A loaded model that served nothing reports zeros.
    const mlp = { model: "mlp_classifier", version: "1" };
    expect(value(s, "nv_inference_request_success", mlp)).toBe(0);
    expect(value(s, "nv_inference_count", mlp)).toBe(0);
    expect(value(s, "nv_model_load_duration_secs", mlp)).toBeGreaterThan(0);
    // Models that are not loaded have no series.
    expect(s.samples.some((x) => x.labels.model === "simple_int8")).toBe(false);

    // Per-model series carry exactly model and version (plus reason on failures).
    for (const sample of s.samples.filter((x) => x.labels.model !== undefined)) {
      const keys = Object.keys(sample.labels).sort();
      expect(keys).toEqual(
        sample.name === "nv_inference_request_failure"
          ? ["model", "reason", "version"]
          : sample.name === "galley_tensor_transfer_bytes"
            ? ["model", "path", "version"]
            : sample.name === "galley_model_memory_bytes"
              ? ["kind", "model", "version"]
              : ["model", "version"],
      );
    }

    // CPU gauges have no labels.
    const cpu = value(s, "nv_cpu_utilization");
    expect(cpu).toBeGreaterThanOrEqual(0);
    expect(cpu).toBeLessThanOrEqual(1);
    const total = value(s, "nv_cpu_memory_total_bytes");
    const used = value(s, "nv_cpu_memory_used_bytes");
    expect(total).toBeGreaterThan(0);
    expect(used).toBeGreaterThan(0);
    expect(used).toBeLessThanOrEqual(total);
    for (const name of ["nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"]) {
      expect(find(s, name)[0]?.labels).toEqual({});
    }
  });

  it("exports every failure reason at 0 as soon as a model loads, before any request (Triton's order)", async () => {
    const { metricsUrl } = await startServer({ metrics: true, controlMode: "explicit", loadModels: ["simple"] });
    const s = await scrape(metricsUrl);
    const failures = s.samples.filter((x) => x.name === "nv_inference_request_failure" && x.labels.model === "simple");
    expect(failures.map((x) => [x.labels.reason, x.value])).toEqual([
      ["REJECTED", 0],
      ["CANCELED", 0],
      ["BACKEND", 0],
      ["OTHER", 0],
    ]);
    // Labels sorted by name, as prometheus-cpp writes them: Triton's QA matches this very text.
    const text = await (await fetch(`${metricsUrl}/metrics`)).text();
    expect(text).toContain('nv_inference_request_failure{model="simple",reason="BACKEND",version="1"} 0\n');
    expect(text).toContain('nv_inference_request_success{model="simple",version="1"} 0\n');
  });

  it("reports the same numbers as the statistics extension", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: true,
      controlMode: "explicit",
      loadModels: ["simple"],
    });
    await someInferences(client);
    const s = await scrape(metricsUrl);
    const stats = (await client.modelStatistics({ name: "simple", version: "1" })).modelStats[0];
    const inference = stats?.inferenceStats;
    expect(value(s, "nv_inference_request_success", SIMPLE)).toBe(Number(inference?.success?.count));
    expect(value(s, "nv_inference_request_failure", { ...SIMPLE, reason: "OTHER" })).toBe(
      Number(inference?.fail?.count),
    );
    expect(value(s, "nv_inference_count", SIMPLE)).toBe(Number(stats?.inferenceCount));
    expect(value(s, "nv_inference_exec_count", SIMPLE)).toBe(Number(stats?.executionCount));

    // Durations: the statistics' nanoseconds in microseconds (Triton adds each request's µs, so
    // allow one µs of truncation per request).
    const close = (metric: string, ns: bigint, count: number) => {
      const us = value(s, metric, SIMPLE);
      expect(Math.abs(us - Number(ns) / 1000), metric).toBeLessThanOrEqual(count + 1);
    };
    const requests = Number(inference?.success?.count ?? 0n) + Number(inference?.fail?.count ?? 0n);
    close("nv_inference_request_duration_us", (inference?.success?.ns ?? 0n) + (inference?.fail?.ns ?? 0n), requests);
    close("nv_inference_queue_duration_us", inference?.queue?.ns ?? 0n, Number(inference?.queue?.count));
    close("nv_inference_compute_input_duration_us", inference?.computeInput?.ns ?? 0n, 4);
    close("nv_inference_compute_infer_duration_us", inference?.computeInfer?.ns ?? 0n, 4);
    close("nv_inference_compute_output_duration_us", inference?.computeOutput?.ns ?? 0n, 4);
  });

  it("drops the *_duration_us counters with counter_latencies=false", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: { counterLatencies: false },
      controlMode: "explicit",
      loadModels: ["simple"],
    });
    await someInferences(client);
    const s = await scrape(metricsUrl);
    expect(s.samples.filter((x) => x.name.endsWith("_duration_us"))).toEqual([]);
    for (const name of LATENCIES) expect(s.types.has(name)).toBe(false);
    expect(value(s, "nv_inference_request_success", SIMPLE)).toBe(4);
    expect(value(s, "nv_inference_count", SIMPLE)).toBe(5);
  });

  it("adds a `_<tag>` label for each metric_tags entry of a model's config", async () => {
    const repo = tempRepository(["simple", "simple_int8"]);
    const config = join(repo, "simple", "config.pbtxt");
    writeFileSync(
      config,
      `${readFileSync(config, "utf8")}
metric_tags { key: "team" value: "vision" }
metric_tags { key: "tier" value: "gold" }
`,
    );
    const { client, metricsUrl } = await startServer({ modelRepositories: [repo], metrics: true });
    await someInferences(client);
    const s = await scrape(metricsUrl);
    const tagged = find(s, "nv_inference_request_success", SIMPLE);
    expect(tagged.map((x) => x.labels)).toEqual([{ model: "simple", version: "1", _team: "vision", _tier: "gold" }]);
    expect(tagged[0]?.value).toBe(4);
    // Labels in Triton's order (prometheus-cpp's, by name): the `_<tag>` ones first, `reason` before `version`.
    const text = await (await fetch(`${metricsUrl}/metrics`)).text();
    expect(text).toContain('nv_inference_request_success{_team="vision",_tier="gold",model="simple",version="1"} 4\n');
    expect(text).toContain(
      'nv_inference_request_failure{_team="vision",_tier="gold",model="simple",reason="OTHER",version="1"} 1\n',
    );
    expect(text).toContain('nv_inference_request_failure{model="simple_int8",reason="REJECTED",version="1"} 0\n');
    for (const sample of s.samples.filter((x) => x.labels.model === "simple")) {
      expect(sample.labels).toMatchObject({ _team: "vision", _tier: "gold" });
    }
    // A model without metric_tags gets no tag labels.
    for (const sample of s.samples.filter((x) => x.labels.model === "simple_int8")) {
      expect(Object.keys(sample.labels).filter((k) => k.startsWith("_"))).toEqual([]);
    }
  });

  it("counts pending requests while they wait, and none once they are done", async () => {
    const repo = tempRepository(["mlp_classifier"]);
    // One instance, no dynamic batching: requests queue behind each other.
    const config = join(repo, "mlp_classifier", "config.pbtxt");
    writeFileSync(config, readFileSync(config, "utf8").replace(/dynamic_batching \{[^}]*\}/, ""));
    const { client, metricsUrl } = await startServer({ modelRepositories: [repo], metrics: true });
    const mlp = { model: "mlp_classifier", version: "1" };
    const input = fp32Bytes(range(64 * 64).map((i) => Math.sin(i)));
    const calls = range(150).map(() =>
      client.modelInfer({
        modelName: "mlp_classifier",
        inputs: [{ name: "INPUT", datatype: "FP32", shape: [64n, 64n] }],
        rawInputContents: [input],
      }),
    );
    let pendingSeen = 0;
    await waitFor(
      async () => {
        pendingSeen = Math.max(pendingSeen, value(await scrape(metricsUrl), "nv_inference_pending_request_count", mlp));
        return pendingSeen > 0;
      },
      { intervalMs: 1, what: "a pending request" },
    );
    await Promise.all(calls);
    const after = await scrape(metricsUrl);
    expect(value(after, "nv_inference_pending_request_count", mlp)).toBe(0);
    expect(value(after, "nv_inference_request_success", mlp)).toBe(150);
    expect(value(after, "nv_inference_count", mlp)).toBe(150 * 64);
  }, 30_000);

  it("drops a model's series when it is unloaded", async () => {
    const { client, metricsUrl } = await startServer({
      metrics: true,
      controlMode: "explicit",
      loadModels: ["simple", "simple_int8"],
    });
    expect(find(await scrape(metricsUrl), "nv_inference_count", SIMPLE)).toHaveLength(1);
    await client.repositoryModelUnload({ modelName: "simple" });
    const s = await scrape(metricsUrl);
    expect(s.samples.filter((x) => x.labels.model === "simple")).toEqual([]);
    expect(find(s, "nv_inference_count", { model: "simple_int8" })).toHaveLength(1);
  });

  it("exports the host-transfer counters as galley_tensor_transfer_bytes, 0 for a CPU model", async () => {
    const { client, metricsUrl, server } = await startServer({
      metrics: true,
      controlMode: "explicit",
      loadModels: ["simple", "simple_int8"],
    });
    await someInferences(client);
    const paths = ["host_to_device", "device_to_host", "on_device", "between_gpus"];
    let s = await scrape(metricsUrl);
    for (const path of paths) expect(value(s, "galley_tensor_transfer_bytes", { ...SIMPLE, path })).toBe(0);
    // What a GPU backend and the CUDA shared-memory copies add (they record into the same counters).
    const before = hostTransfers.snapshot().models.simple_int8;
    hostTransfers.record("simple_int8", {
      hostToDevice: 4096,
      deviceToHost: 1024,
      onDevice: 1 << 20,
      betweenGpus: 512,
    });
    s = await scrape(metricsUrl);
    const expected = [4096, 1024, 1 << 20, 512];
    const base = [
      before?.hostToDevice ?? 0,
      before?.deviceToHost ?? 0,
      before?.onDevice ?? 0,
      before?.betweenGpus ?? 0,
    ];
    for (const [i, path] of paths.entries()) {
      const bytes = (base[i] ?? 0) + (expected[i] ?? 0);
      expect(value(s, "galley_tensor_transfer_bytes", { model: "simple_int8", path })).toBe(bytes);
    }
    expect(find(s, "galley_tensor_transfer_bytes", { model: "mlp_classifier" })).toEqual([]);
    // Per-GPU executions only for models that ran on a GPU: none yet; then what a GPU backend's
    // instances on GPUs 0 and 1 add (the scheduler records each execution with its instance's GPU).
    expect(find(s, "galley_gpu_execution_count", {})).toEqual([]);
    const stats = server.core.models.resolve("simple_int8", "").stats;
    stats.recordExecution(8, 2, 1000n, 3_000_000n, 1000n, 0);
    stats.recordExecution(4, 1, 1000n, 1_000_000n, 1000n, 1);
    stats.recordExecution(4, 1, 1000n, 1_000_000n, 1000n, 1);
    s = await scrape(metricsUrl);
    const int8 = { model: "simple_int8", version: "1" };
    expect(value(s, "galley_gpu_execution_count", { ...int8, device: "0" })).toBe(1);
    expect(value(s, "galley_gpu_execution_count", { ...int8, device: "1" })).toBe(2);
    expect(value(s, "galley_gpu_inference_count", { ...int8, device: "1" })).toBe(8);
    expect(value(s, "galley_gpu_compute_infer_duration_us", { ...int8, device: "0" })).toBe(3000);
    expect(find(s, "galley_gpu_execution_count", SIMPLE)).toEqual([]);
  });

  it("answers /metrics/ too, and any other path with 200 and an empty body", async () => {
    const { metricsUrl } = await startServer({ metrics: true, controlMode: "explicit", loadModels: ["simple"] });
    expect(find(await scrape(metricsUrl, "/metrics/"), "nv_inference_count", SIMPLE)).toHaveLength(1);
    for (const path of ["/", "/foo", "/metricsx", "/v2/health/ready", "/metrics/extra"]) {
      const response = await fetch(`${metricsUrl}${path}`);
      expect(response.status, path).toBe(200);
      expect(await response.text(), path).toBe("");
    }
  });
});
