/**
 * A typed TypeScript client for Triton-compatible inference servers (Galley and Triton itself):
 * gRPC, gRPC-Web or Connect over HTTP/2, and KServe v2 REST, with typed tensors, streaming, and
 * system and CUDA shared memory; and Galley's asynchronous videos API ({@link createVideosClient}).
 *
 * @packageDocumentation
 * @module @galley/client
 */

/**
 * The error every call of either client rejects with, whatever the transport: gRPC, Connect and
 * REST alike. Its `code` is a gRPC {@link Code}: for a reply from the server, the code of Triton's
 * error (over REST, mapped from the HTTP status the way the server maps codes to statuses: 400
 * INVALID_ARGUMENT, 404 NOT_FOUND, 500 INTERNAL, 501 UNIMPLEMENTED, 503 UNAVAILABLE); a refused
 * connection is UNAVAILABLE and names the URL, a passed deadline (`timeoutMs`) DEADLINE_EXCEEDED,
 * an aborted signal CANCELED, and a `timeoutMs` that is not a number of milliseconds from 0 to
 * 2^31 - 1 INVALID_ARGUMENT. `rawMessage` is the server's text as it sent it. Re-exported from
 * `@connectrpc/connect`, so `instanceof` agrees with errors Connect itself throws.
 */
export { Code, ConnectError } from "@connectrpc/connect";
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
export { createRestClient, type RestClient, type RestClientOptions } from "./rest-client.js";
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
export type { VideoEventsOptions } from "./video-events.js";
export type {
  CreateVideoRequest,
  Video,
  VideoApiErrorBody,
  VideoContentVariant,
  VideoDeleted,
  VideoEvent,
  VideoList,
  VideoPriority,
  VideoStatus,
} from "./video-types.js";
export {
  type CreateVideoOptions,
  createVideosClient,
  type ListVideosOptions,
  type VideoCallOptions,
  type VideoContent,
  type VideoContentOptions,
  type VideosClient,
  type VideosClientOptions,
} from "./videos-client.js";
export { VideosApiError } from "./videos-error.js";
