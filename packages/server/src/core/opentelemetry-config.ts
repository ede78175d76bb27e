// What mode `opentelemetry` is configured with, apart from the exporter itself (span-export.ts),
// whose OpenTelemetry SDK is loaded only when the mode is used.

/** `--trace-config opentelemetry,<setting>=<value>`: where and how spans are exported (Triton's settings). */
export interface OpenTelemetryConfig {
  /** The OTLP/HTTP receiver (default `http://localhost:4318/v1/traces`; `http://` is added when no scheme is given). */
  url: string;
  /** Resource attributes, `service.name=triton-inference-server` unless given; later entries win. */
  resource: readonly (readonly [string, string])[];
  /** Most spans waiting to be exported; past it a span is dropped and counted (default 2048, `OTEL_BSP_MAX_QUEUE_SIZE`). */
  bspMaxQueueSize: number;
  /** Milliseconds between two exports (default 5000, `OTEL_BSP_SCHEDULE_DELAY`). */
  bspScheduleDelay: number;
  /** Most spans in one export, at most `bspMaxQueueSize` (default 512, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`). */
  bspMaxExportBatchSize: number;
}

/** Triton's defaults for {@link OpenTelemetryConfig}. */
export const DEFAULT_OPENTELEMETRY_CONFIG: OpenTelemetryConfig = {
  url: "http://localhost:4318/v1/traces",
  resource: [],
  bspMaxQueueSize: 2048,
  bspScheduleDelay: 5000,
  bspMaxExportBatchSize: 512,
};

/** How long one export may take before it is given up (and its spans counted as dropped). */
export const OTLP_EXPORT_TIMEOUT_MS = 10_000;

/** The shortest time between two log lines about dropped spans (the rest are counted into the next). */
export const DROP_LOG_INTERVAL_MS = 10_000;

/**
 * The receiver's URL as the exporter takes it: `http://` added when `url` has no scheme (Triton's
 * `host:port/path` form). @throws Error `invalid OTLP/HTTP url '<url>'` for anything that is not
 * an `http:` or `https:` URL with a host.
 */
export function otlpUrl(url: string): string {
  const full = /^[a-z][a-z0-9+.-]*:\/\//i.test(url) ? url : `http://${url}`;
  let parsed: URL | undefined;
  try {
    parsed = new URL(full);
  } catch {
    parsed = undefined;
  }
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:") || parsed.hostname === "")
    throw new Error(`invalid OTLP/HTTP url '${url}' (expected [http[s]://]<host>[:<port>][/<path>])`);
  return full;
}
