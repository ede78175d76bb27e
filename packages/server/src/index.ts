/**
 * Galley's reference server: a Triton-compatible inference server for Node.js. It speaks the
 * KServe v2 REST protocol (with Triton's extensions) and `inference.GRPCInferenceService`, so
 * Triton's clients, tools and dashboards work against it unchanged.
 *
 * @packageDocumentation
 */

export type { Backend, BackendInstance, BackendLoadContext, BackendModel, ExecuteResult } from "./backend/backend.js";
export type { ResponseCache } from "./cache/response-cache.js";
export { DATATYPES, type DatatypeInfo, datatype, type TypedArrayConstructor } from "./core/datatype.js";
export { ERRORS, type ErrorId, InferenceError, type TritonCode } from "./core/errors.js";
export type {
  DecoupledResponse,
  InferenceRequest,
  InferenceResponse,
  RequestedOutput,
  Responder,
  StreamedResponse,
} from "./core/inference-request.js";
// The core, for embedding Galley and for backends.
export {
  EXTENSIONS,
  GALLEY_VERSION,
  type InferenceServer,
  type InferenceServerOptions,
  type ModelMetadata,
  type ServerMetadata,
  type TensorMetadata,
} from "./core/inference-server.js";
export {
  SharedMemoryManager,
  type SharedMemoryRef,
  type SharedMemoryRegionStatus,
} from "./core/shared-memory.js";
export type { Duration, ModelStatistics } from "./core/statistics.js";
export type { Parameters, ParameterValue, Tensor } from "./core/tensor.js";
export type { GrpcFrontendOptions } from "./frontend/grpc/inference-service.js";
export type { HttpFrontendOptions } from "./frontend/http/http-handler.js";
export type { MetricsOptions } from "./frontend/metrics/metrics-handler.js";
export { createLogger, type Logger, type LoggerOptions, type LogSettings } from "./log.js";
export type { LoadedModel } from "./repository/loaded-model.js";
export type {
  ControlMode,
  IndexEntry,
  LoadOverrides,
  ModelManager,
  ModelState,
  VersionStatus,
} from "./repository/model-manager.js";
export type { ResourceLimit } from "./scheduler/rate-limiter.js";
export type { ScheduledResult, Scheduler } from "./scheduler/scheduler.js";
export {
  createServer,
  type EndpointOptions,
  type GalleyServer,
  type ServerAddresses,
  type ServerOptions,
} from "./server.js";
