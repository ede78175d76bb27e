import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import { type Context, ROOT_CONTEXT, type TextMapGetter, type Tracer, trace } from "@opentelemetry/api";
import { type ExportResult, ExportResultCode, W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type Span,
  type SpanExporter,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import type { TraceHeader } from "../base/trace.js";
import {
  DROP_LOG_INTERVAL_MS,
  type OpenTelemetryConfig,
  OTLP_EXPORT_TIMEOUT_MS,
  otlpUrl,
} from "./opentelemetry-config.js";

/** Triton's tracer name. */
const TRACER_NAME = "triton-server";

const HEADER_GETTER: TextMapGetter<TraceHeader> = {
  get: (carrier, key) => carrier.header(key),
  keys: () => ["traceparent", "tracestate"],
};

/**
 * The OpenTelemetry side of the trace extension (mode `opentelemetry`): one tracer provider
 * (always sampling: the trace settings decide what is traced), Triton's batch span processor
 * options in front of an OTLP/HTTP protobuf exporter, and the W3C trace-context propagator that
 * reads `traceparent`/`tracestate`. Nothing here is global: the process's OpenTelemetry API
 * registrations are left alone. Exporting never holds a request: spans wait in a queue of
 * `bspMaxQueueSize`; when it is full, or an export fails or times out, the spans are dropped,
 * counted, and logged at most every {@link DROP_LOG_INTERVAL_MS}.
 */
export class SpanExport {
  readonly tracer: Tracer;
  readonly #provider: BasicTracerProvider;
  readonly #propagator = new W3CTraceContextPropagator();
  readonly #log: (message: string) => void;
  readonly #agent: HttpAgent;
  readonly #exporter: CountingExporter;
  readonly #queue: BoundedQueue;
  #dropped = 0;
  #closed = false;
  #unreported = 0;
  #lastReason = "";
  #lastLog = 0;

  constructor(config: OpenTelemetryConfig, log: (message: string) => void) {
    this.#log = log;
    const url = otlpUrl(config.url);
    // Ours, so that close() can end an export a receiver never answers (nothing else would).
    this.#agent = url.startsWith("https:") ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
    const agent = this.#agent;
    const exporter = new CountingExporter(
      new OTLPTraceExporter({ url, timeoutMillis: OTLP_EXPORT_TIMEOUT_MS, httpAgentOptions: () => agent }),
      (count, reason) => this.#drop(count, reason),
    );
    this.#exporter = exporter;
    const batch = new BatchSpanProcessor(exporter, {
      maxQueueSize: config.bspMaxQueueSize,
      scheduledDelayMillis: config.bspScheduleDelay,
      maxExportBatchSize: Math.min(config.bspMaxExportBatchSize, config.bspMaxQueueSize),
      exportTimeoutMillis: OTLP_EXPORT_TIMEOUT_MS,
    });
    this.#queue = new BoundedQueue(batch, config.bspMaxQueueSize, exporter, (n) => this.#drop(n, "queue full"));
    const attributes: Record<string, string> = {};
    for (const [key, value] of config.resource) attributes[key] = value;
    // Triton's service name, unless OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES or a flag names one.
    const resource = defaultResource()
      .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: "triton-inference-server" }))
      .merge(detectResources({ detectors: [envDetector] }))
      .merge(resourceFromAttributes(attributes));
    this.#provider = new BasicTracerProvider({
      resource,
      sampler: new AlwaysOnSampler(),
      spanProcessors: [this.#queue],
    });
    this.tracer = this.#provider.getTracer(TRACER_NAME);
  }

  /** Spans dropped so far (queue full, export failed or timed out). */
  get dropped(): number {
    return this.#dropped;
  }

  /**
   * The caller's span context from W3C `traceparent`/`tracestate` (`carrier` reads a request
   * header or gRPC metadata by lower-case name), or undefined when absent or malformed (the W3C
   * rules: a malformed header is ignored).
   */
  extract(carrier: TraceHeader): Context | undefined {
    if (carrier.header("traceparent") === undefined) return undefined;
    const context = this.#propagator.extract(ROOT_CONTEXT, carrier, HEADER_GETTER);
    return trace.getSpanContext(context) ? context : undefined;
  }

  /**
   * Export what is queued, waiting at most `timeoutMs`; what is left is dropped (and logged), and
   * an export still waiting for the receiver is ended.
   */
  async close(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<"expired">((done) => {
      timer = setTimeout(() => done("expired"), Math.max(0, timeoutMs));
    });
    try {
      const outcome = await Promise.race([this.#provider.shutdown().then(() => "done" as const), expired]);
      if (outcome === "expired")
        this.#log(`OpenTelemetry trace export did not finish within ${timeoutMs} ms of shutdown`);
    } catch (error) {
      this.#log(`OpenTelemetry trace export failed at shutdown: ${(error as Error).message}`);
    } finally {
      clearTimeout(timer);
      this.#abandon();
    }
    // Spans still queued, or in an export that never ended, are lost too (and counted once:
    // the abandoned exports' failures, which come later, are not counted again).
    const unsent = this.#queue.accepted - this.#exporter.settled;
    if (unsent > 0) this.#drop(unsent, "not exported at shutdown");
    this.#closed = true;
    if (this.#unreported > 0) this.#report();
  }

  /**
   * End the exports still waiting for the receiver. Their sockets end with an error that has no
   * network code, which the exporter does not retry: no timer or socket is left to hold the process.
   */
  #abandon(): void {
    const error = new Error("export abandoned at shutdown");
    const agent = this.#agent;
    for (const sockets of [...Object.values(agent.sockets), ...Object.values(agent.freeSockets)])
      for (const socket of sockets ?? []) socket.destroy(error);
    agent.destroy();
  }

  #drop(count: number, reason: string): void {
    if (this.#closed) return;
    this.#dropped += count;
    this.#unreported += count;
    this.#lastReason = reason;
    if (Date.now() - this.#lastLog >= DROP_LOG_INTERVAL_MS) this.#report();
  }

  #report(): void {
    this.#lastLog = Date.now();
    this.#log(
      `OpenTelemetry trace export dropped ${this.#unreported} spans (${this.#lastReason}); ${this.#dropped} in all`,
    );
    this.#unreported = 0;
  }
}

/** The exporter, counting the spans it was handed and those whose export failed. */
class CountingExporter implements SpanExporter {
  handed = 0;
  /** Spans whose export ended, exported or not. */
  settled = 0;

  constructor(
    readonly inner: SpanExporter,
    readonly onFailed: (count: number, reason: string) => void,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.handed += spans.length;
    this.inner.export(spans, (result) => {
      this.settled += spans.length;
      if (result.code !== ExportResultCode.SUCCESS)
        this.onFailed(spans.length, result.error?.message ?? "export failed");
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/**
 * The batch processor's queue bound, applied here so that a span it would drop is counted: the
 * spans ended and accepted, less those handed to the exporter, are the ones queued.
 */
class BoundedQueue implements SpanProcessor {
  accepted = 0;

  constructor(
    readonly inner: SpanProcessor,
    readonly maxQueueSize: number,
    readonly exporter: CountingExporter,
    readonly onDropped: (count: number) => void,
  ) {}

  onStart(span: Span, context: Context): void {
    this.inner.onStart(span, context);
  }

  onEnd(span: ReadableSpan): void {
    if (this.accepted - this.exporter.handed >= this.maxQueueSize) {
      this.onDropped(1);
      return;
    }
    this.accepted++;
    this.inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}
