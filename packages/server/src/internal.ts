/**
 * What only Galley's own packages and backend authors need: the backend contract, the
 * schedulers, the model repository and the tables behind them. Nothing here is a stable API;
 * users import from `@galley/server` (running and embedding the server) and
 * `@galley/server/model` (scripted models).
 *
 * @packageDocumentation
 * @module @galley/server/internal
 */

export type {
  Backend,
  BackendInstance,
  BackendLoadContext,
  BackendModel,
  DevicePlacement,
  DirectRecord,
  DirectRoute,
  DirectRun,
  DirectRunner,
  DirectRunnerHooks,
  DirectRunnerModule,
  DirectTarget,
  ExecuteResult,
} from "./backend/backend.js";
export { DirectRouteGone } from "./backend/backend.js";
export type { TorchIO } from "./backend/pytorch/pytorch-io.js";
export { DATATYPES, type DatatypeInfo, datatype, type TypedArrayConstructor } from "./base/datatype.js";
export type { DeviceMemoryReader, DeviceMemoryReading } from "./base/device-memory.js";
export { InferenceError } from "./base/errors.js";
export type { LatencyHistogram } from "./base/latency-histogram.js";
export type { Duration, ModelStatistics } from "./base/statistics.js";
export type { ResponseCache } from "./cache/response-cache.js";
export {
  type GpuAllocation,
  GpuCopies,
  type GpuCopyDriver,
  type GpuCopyRoute,
  gpuCopyRoute,
  type MovedTensor,
} from "./core/gpu-copy.js";
export type { InferenceServerOptions } from "./core/inference-server.js";
export {
  type CudaIpc,
  type CudaRegionMemory,
  type CudaSharedMemoryRegionStatus,
  type DeviceLocation,
  type SharedMemoryKind,
  SharedMemoryManager,
  type SharedMemoryRef,
  type SharedMemoryRegionStatus,
} from "./core/shared-memory.js";
export type { GpuMetricsSource } from "./frontend/metrics/gpu-metrics.js";
export { nvmlMemoryReader } from "./gpu-memory.js";
export { createVideoEncoder, type Frames, type VideoEncoder } from "./jobs/video-encoder.js";
export type { LoadedModel } from "./repository/loaded-model.js";
export { gpuMemorySource, hostMemorySource, type MemorySource, measureWith } from "./repository/memory-source.js";
export type {
  ControlMode,
  IndexEntry,
  ModelManager,
  ModelState,
  VersionStatus,
} from "./repository/model-manager.js";
export type { BatchMemory } from "./scheduler/batch-memory.js";
export type { ResourceLimit } from "./scheduler/rate-limiter.js";
export type { ScheduledResult, Scheduler } from "./scheduler/scheduler.js";
