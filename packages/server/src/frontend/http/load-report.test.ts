import { describe, expect, it } from "vitest";
import { endpointLoadMetrics, type LoadSource } from "./load-report.js";

const source = (metricsText: string, free?: number): LoadSource => ({
  metricsText: () => metricsText,
  gpuMemoryFreeBytes: () => free,
});

// What a TensorRT-LLM-style model exports through a custom metric family.
const KV = `# HELP nv_trt_llm_kv_cache_block_metrics KV cache blocks
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="llm",version="1"} 256
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="llm",version="1"} 64
`;

describe("endpointLoadMetrics", () => {
  it("computes Triton's kv_cache_utilization and max_token_capacity from the KV block family, first", () => {
    expect(endpointLoadMetrics("text", [], source(KV, 1024))).toBe(
      "TEXT named_metrics.kv_cache_utilization=0.250000, named_metrics.max_token_capacity=16384, " +
        "named_metrics.num_requests_waiting=0, named_metrics.num_requests_running=0, named_metrics.gpu_memory_free_bytes=1024",
    );
    expect(endpointLoadMetrics("json", [], source(KV))).toBe(
      'JSON {"named_metrics":{"kv_cache_utilization":0.25,"max_token_capacity":16384,"num_requests_waiting":0,"num_requests_running":0}}',
    );
  });

  it("writes an integral double as RapidJSON does, and leaves the KV pair out unless all three block types are there", () => {
    const empty = KV.replace(/"used",model="llm",version="1"\} 64/, '"used",model="llm",version="1"} 0');
    expect(endpointLoadMetrics("json", [], source(empty))).toMatch(
      /^JSON \{"named_metrics":\{"kv_cache_utilization":0\.0,/,
    );
    const partial = KV.split("\n")
      .filter((l) => !l.includes('"max"'))
      .join("\n");
    expect(endpointLoadMetrics("text", [], source(partial))).toBe(
      "TEXT named_metrics.num_requests_waiting=0, named_metrics.num_requests_running=0",
    );
  });

  it("answers nothing for a format other than text or json (Triton's are lower case)", () => {
    for (const format of ["TEXT", "Json", "", "binary"])
      expect(endpointLoadMetrics(format, [], source(KV))).toBeUndefined();
  });
});
