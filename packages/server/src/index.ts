/**
 * Galley's reference server: a Triton-compatible inference server for Node.js. It speaks the
 * KServe v2 REST protocol (with Triton's extensions) and `inference.GRPCInferenceService`, so
 * Triton's clients, tools and dashboards work against it unchanged.
 *
 * This entry point is for people who run or embed the server: {@link createServer} and its
 * options, the core's inference calls, the request and response shapes, and the errors.
 * Scripted models import their types from `@galley/server/model`; what only Galley's own
 * packages and backend authors need (the backend contract, schedulers, the repository) is
 * behind `@galley/server/internal`.
 *
 * @packageDocumentation
 * @module @galley/server
 */

export type { JsIsolation } from "./backend/js/js-backend.js";
export type { Clock } from "./base/clock.js";
// Errors: Triton's codes and texts.
export { ERRORS, type ErrorId, InferenceError, type TritonCode } from "./base/errors.js";
export {
  type HostTransferCounts,
  type HostTransferSnapshot,
  type HostTransfers,
  hostTransfers,
} from "./base/host-transfers.js";
export type {
  DecoupledResponse,
  InferenceRequest,
  InferenceResponse,
  RequestedOutput,
  Responder,
  StreamedResponse,
} from "./base/inference-request.js";
export { createLogger, type Logger, type LoggerOptions, type LogSettings } from "./base/log.js";
export type { DeviceTensor, Parameters, ParameterValue, Tensor } from "./base/tensor.js";
export { TRACE_TENSORS, TRACE_TIMESTAMPS, type Trace, type TraceHeader } from "./base/trace.js";
// Embedding: the core every frontend calls, and what goes in and out of it.
export {
  EXTENSIONS,
  GALLEY_VERSION,
  type InferenceServer,
  type LoadOverrides,
  type MemoryBudgetLimits,
  type MemoryCounters,
  type MemoryUsage,
  type ModelMetadata,
  type ModelView,
  type OnDemandWait,
  type RepositoryIndexEntry,
  type ServerMetadata,
  type TensorMetadata,
} from "./core/inference-server.js";
export type { LogSettingValue } from "./core/log-settings.js";
export {
  DEFAULT_OPENTELEMETRY_CONFIG,
  DROP_LOG_INTERVAL_MS,
  type OpenTelemetryConfig,
  OTLP_EXPORT_TIMEOUT_MS,
} from "./core/opentelemetry-config.js";
export type { SpanExport } from "./core/span-export.js";
export type {
  TraceConfig,
  TraceMode,
  TraceSettings,
  TraceSettingsReport,
  TraceUpdate,
} from "./core/trace-settings.js";
export { type Endpoint, EndpointError } from "./endpoint-error.js";
export type { GrpcFrontendOptions } from "./frontend/grpc/grpc-options.js";
export type { LoadSource } from "./frontend/http/load-report.js";
export type { HttpFrontendOptions } from "./frontend/http/rest-frontend.js";
export type { MetricsOptions } from "./frontend/metrics/metrics-handler.js";
export type { JobsOptions } from "./jobs/job-service.js";
export type { WebhookOptions } from "./jobs/webhooks.js";
// Running the server.
export {
  createServer,
  type EndpointOptions,
  type GalleyServer,
  type GpuMemoryAdmissionSettings,
  type ServerAddresses,
  type ServerOptions,
  TRACE_FLUSH_MARGIN_MS,
} from "./server.js";
