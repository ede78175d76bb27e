/**
 * A typed TypeScript client for Triton-compatible inference servers (Galley and Triton itself):
 * gRPC, gRPC-Web or Connect over HTTP/2, and KServe v2 REST, with typed tensors, streaming, and
 * system and CUDA shared memory.
 *
 * @packageDocumentation
 * @module @galley/client
 */

export type {
  CallOptions,
  CudaSharedMemoryStatus,
  InferenceClient,
  InferInput,
  InferOptions,
  InferResult,
  ModelIndexEntry,
  ModelMetadata,
  ParameterValue,
  RequestedOutput,
  ServerMetadata,
  SharedMemoryPlacement,
  SharedMemoryStatus,
  TensorMetadata,
} from "./client-types.js";
export {
  CUDA_IPC_HANDLE_BYTES,
  type CudaAllocator,
  type CudaDeviceMemory,
  CudaSharedMemory,
  type CudaSharedMemoryOptions,
} from "./cuda-shared-memory.js";
export {
  createGrpcClient,
  type GrpcClient,
  type GrpcClientOptions,
  type GrpcProtocol,
  grpcInferRequest,
  grpcInferResult,
  type InferStream,
  type KeepaliveOptions,
  type StreamResult,
} from "./grpc-client.js";
export { createRestClient, type RestClient, type RestClientOptions, RestError } from "./rest-client.js";
export { IDEMPOTENT_METHODS, type RetryOptions, retryInterceptor } from "./retry.js";
export {
  fileRegionStore,
  type RegionMemory,
  type RegionStore,
  SHM_ROOT,
  type SharedMemoryOptions,
  SystemSharedMemory,
} from "./shared-memory.js";
export { type RegionBytes, SharedRegion } from "./shared-region.js";
export {
  type DataType,
  decodeBytes,
  elementCount,
  encodeBytes,
  fromBfloat16Bits,
  fromFloat16Bits,
  type InputTensor,
  OutputTensor,
  tensor,
  toBfloat16Bits,
  toFloat16Bits,
} from "./tensor.js";
