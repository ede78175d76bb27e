// ORCA load reports (Triton's orca_http.cc): /generate and /generate_stream answer with
// `endpoint-load-metrics` when the request asks with `endpoint-load-metrics-format: text|json`,
// and metrics are on. Checked with requests held at a gate: the queue they form and the one
// that executes show in the report, exactly; after the gate opens both go back to 0.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { GpuMetricsSource } from "../src/frontend/metrics/gpu-metrics.js";
import { cleanup, startServer, tempRepository, waitFor } from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

const GIB = 1 << 30;
const MIB = 1 << 20;
/** One stand-in GPU with 1 GiB, 1 MiB of it used (no NVML here). */
const oneGpu: GpuMetricsSource = {
  sample: async () => ({
    available: true,
    driverVersion: "",
    gpus: [
      {
        index: 0,
        uuid: "GPU-00000000-0000-0000-0000-000000000000",
        name: "stand-in",
        memoryTotalBytes: GIB,
        memoryUsedBytes: MIB,
        errors: {},
      },
    ],
  }),
};

/** `gated` (waits until the file `gate` exists) and `echo`, both returning their INT32 input. */
function repository(): { repo: string; gate: string } {
  const repo = tempRepository();
  const gate = join(repo, "gate");
  for (const [name, wait] of [
    ["gated", `while (!existsSync(${JSON.stringify(gate)})) await new Promise((resolve) => setTimeout(resolve, 5));`],
    ["echo", ""],
  ] as const) {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"\nbackend: "js"\nmax_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]\n`,
    );
    writeFileSync(
      join(repo, name, "1", "model.mjs"),
      `import { existsSync } from "node:fs";
export default class {
  async execute(requests) {
    ${wait}
    return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").typed() }] }));
  }
}
`,
    );
  }
  return { repo, gate };
}

async function generate(httpUrl: string, model: string, headers: Record<string, string> = {}, stream = false) {
  const response = await fetch(`${httpUrl}/v2/models/${model}/${stream ? "generate_stream" : "generate"}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ IN: 7 }),
  });
  const body = await response.text();
  expect(response.status, body).toBe(200);
  return { header: response.headers.get("endpoint-load-metrics"), body };
}

describe("endpoint-load-metrics (ORCA)", () => {
  it("reports the requests waiting and running and the GPUs' free memory, in TEXT and JSON", async () => {
    const { repo, gate } = repository();
    const { httpUrl, metricsUrl } = await startServer({
      modelRepositories: [repo],
      http: true,
      metrics: { gpuSource: oneGpu },
    });
    const url = httpUrl as string;
    const free = GIB - MIB;
    const idle = await generate(url, "echo", { "endpoint-load-metrics-format": "text" });
    expect(idle.body).toBe('{"OUT":7,"model_name":"echo","model_version":"1"}');
    expect(idle.header).toBe(
      `TEXT named_metrics.num_requests_waiting=0, named_metrics.num_requests_running=0, named_metrics.gpu_memory_free_bytes=${free}`,
    );

    // Three requests on gated's one instance: one executes at the gate, two wait in its queue.
    const held = [1, 2, 3].map(() => generate(url, "gated"));
    await waitFor(
      async () => sampleValue(await scrape(metricsUrl), "nv_inference_pending_request_count", { model: "gated" }) === 2,
      { what: "two gated requests queued behind the one at the gate" },
    );
    expect((await generate(url, "echo", { "endpoint-load-metrics-format": "text" })).header).toBe(
      `TEXT named_metrics.num_requests_waiting=2, named_metrics.num_requests_running=1, named_metrics.gpu_memory_free_bytes=${free}`,
    );
    expect((await generate(url, "echo", { "endpoint-load-metrics-format": "json" })).header).toBe(
      `JSON {"named_metrics":{"num_requests_waiting":2,"num_requests_running":1,"gpu_memory_free_bytes":${free}}}`,
    );
    // On generate_stream too, with the first event.
    const streamed = await generate(url, "echo", { "endpoint-load-metrics-format": "json" }, true);
    expect(streamed.body).toBe('data: {"OUT":7,"model_name":"echo","model_version":"1"}\n\n');
    expect(streamed.header).toBe(
      `JSON {"named_metrics":{"num_requests_waiting":2,"num_requests_running":1,"gpu_memory_free_bytes":${free}}}`,
    );
    // Only when asked, and only in Triton's formats (lower case).
    expect((await generate(url, "echo")).header).toBeNull();
    expect((await generate(url, "echo", { "endpoint-load-metrics-format": "TEXT" })).header).toBeNull();

    writeFileSync(gate, "");
    for (const answer of await Promise.all(held)) expect(answer.header).toBeNull();
    expect((await generate(url, "echo", { "endpoint-load-metrics-format": "text" })).header).toBe(
      `TEXT named_metrics.num_requests_waiting=0, named_metrics.num_requests_running=0, named_metrics.gpu_memory_free_bytes=${free}`,
    );
  });

  it("is not written when metrics are off, as Triton reads the report from its metrics", async () => {
    const { repo } = repository();
    const { httpUrl } = await startServer({ modelRepositories: [repo], http: true, metrics: false });
    expect((await generate(httpUrl as string, "echo", { "endpoint-load-metrics-format": "text" })).header).toBeNull();
  });

  it("leaves free GPU memory out where there is no GPU reading", async () => {
    const { repo } = repository();
    const noGpu: GpuMetricsSource = { sample: async () => ({ available: false, reason: "no GPU here" }) };
    const { httpUrl } = await startServer({ modelRepositories: [repo], http: true, metrics: { gpuSource: noGpu } });
    expect((await generate(httpUrl as string, "echo", { "endpoint-load-metrics-format": "json" })).header).toBe(
      'JSON {"named_metrics":{"num_requests_waiting":0,"num_requests_running":0}}',
    );
  });
});
