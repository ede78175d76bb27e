// ORCA load reports (Triton's `orca_http.cc`): a generate response carries the header
// `endpoint-load-metrics` when its request asked with `endpoint-load-metrics-format: text|json`.
import { Platform } from "@galley/config";
import type { ModelView } from "../../core/inference-server.js";

/** The request header that asks for a load report, and its values (Triton's, lower case only). */
export const LOAD_METRICS_FORMAT = "endpoint-load-metrics-format";
/** The response header that carries it. */
export const LOAD_METRICS = "endpoint-load-metrics";

/**
 * What a load report reads besides the models' own counts: the server's metrics text (where a
 * model's custom `nv_trt_llm_kv_cache_block_metrics` family may be, as TensorRT-LLM exports it)
 * and the GPUs' free memory from the GPU metrics' latest sample. Present only with metrics on,
 * as Triton reports load only where its metrics are.
 */
export interface LoadSource {
  metricsText(): string;
  gpuMemoryFreeBytes(): number | undefined;
}

/** A load report's named metrics, in the order written. */
type Named = [name: string, value: number, kind: "double" | "integer"][];

const KV_FAMILY = "nv_trt_llm_kv_cache_block_metrics";

/**
 * Triton's two KV-cache metrics from `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=
 * "tokens_per"|"used"|"max"}`: utilisation (used / max, 0 when max is 0) and token capacity
 * (max × tokens per block). None unless all three are there.
 */
function kvCacheMetrics(text: string): Named {
  let tokensPer = -1;
  let used = -1;
  let max = -1;
  const sample = new RegExp(`^${KV_FAMILY}(?:\\{(.*?)\\})?\\s*(\\d+(?:\\.\\d+)?)`, "gm");
  for (const [, labels = "", value] of text.matchAll(sample)) {
    const type = /(?:^|,)kv_cache_block_type="([^"]*)"/.exec(labels)?.[1];
    if (type === "tokens_per") tokensPer = Number(value);
    else if (type === "used") used = Number(value);
    else if (type === "max") max = Number(value);
  }
  if (tokensPer < 0 || used < 0 || max < 0) return [];
  return [
    ["kv_cache_utilization", max > 0 ? used / max : 0, "double"],
    ["max_token_capacity", Math.trunc(max * tokensPer), "integer"],
  ];
}

/**
 * Galley's load: requests waiting in schedulers' queues, requests in the pipeline and not
 * waiting (executing, or their tensors being placed or written), and the GPUs' free memory where
 * the GPU metrics read it. An ensemble's own requests are left out: its steps count in theirs.
 */
function serverLoad(models: readonly ModelView[], source: LoadSource): Named {
  let waiting = 0;
  let inflight = 0;
  for (const model of models) {
    if (model.config.platform === Platform.ensemble) continue;
    waiting += model.stats.pending;
    inflight += model.stats.inflight;
  }
  const named: Named = [
    ["num_requests_waiting", waiting, "integer"],
    ["num_requests_running", Math.max(0, inflight - waiting), "integer"],
  ];
  const free = source.gpuMemoryFreeBytes();
  if (free !== undefined) named.push(["gpu_memory_free_bytes", free, "integer"]);
  return named;
}

/**
 * The `endpoint-load-metrics` value over the server's READY `models` for `format` (`text` or
 * `json`, as Triton's request header takes them), or undefined for any other format. TEXT as
 * Triton writes it: `TEXT named_metrics.<name>=<value>, ...`, doubles with six decimals (C++
 * `std::to_string`); JSON: `JSON {"named_metrics":{...}}`, doubles as RapidJSON writes them (an
 * integral one with `.0`).
 */
export function endpointLoadMetrics(
  format: string,
  models: readonly ModelView[],
  source: LoadSource,
): string | undefined {
  if (format !== "text" && format !== "json") return undefined;
  const named = [...kvCacheMetrics(source.metricsText()), ...serverLoad(models, source)];
  if (format === "text") {
    const value = (v: number, kind: string) => (kind === "double" ? v.toFixed(6) : String(v));
    return `TEXT ${named.map(([name, v, kind]) => `named_metrics.${name}=${value(v, kind)}`).join(", ")}`;
  }
  const value = (v: number, kind: string) => (kind === "double" && Number.isInteger(v) ? `${v}.0` : String(v));
  return `JSON {"named_metrics":{${named.map(([name, v, kind]) => `"${name}":${value(v, kind)}`).join(",")}}}`;
}
