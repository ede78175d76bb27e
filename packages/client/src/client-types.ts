// The API both clients (gRPC and REST) share, so an application can switch protocol with one line.
import type { ModelConfig, ModelStatisticsResponse } from "@galley/proto";
import type { InputTensor, OutputTensor, SharedMemoryPlacement } from "./tensor.js";

export type { SharedMemoryPlacement };

/** A request, response or tensor parameter value. */
export type ParameterValue = string | number | bigint | boolean;

/** An output to return, by name or with options. */
export interface RequestedOutput {
  name: string;
  /** Triton's classification extension: the top N classes instead of the tensor. */
  classification?: number;
  /** REST only: return this output as binary data (the default) or as JSON (`false`). */
  binary?: boolean;
  /** Write the output into a registered shared-memory region instead of the response. */
  sharedMemory?: SharedMemoryPlacement;
}

/** An input given as a tensor, or as bytes already placed in a registered shared-memory region. */
export type InferInput = InputTensor | (Omit<InputTensor, "data"> & { sharedMemory: SharedMemoryPlacement });

/** One inference. */
export interface InferOptions {
  inputs: Record<string, InferInput>;
  /** Outputs to return; all of the model's when absent. */
  outputs?: readonly (string | RequestedOutput)[];
  /** Empty or absent: the server picks (the highest ready version). */
  version?: string;
  /** Echoed in the response. */
  id?: string;
  parameters?: Record<string, ParameterValue>;
  /** Triton's `priority` (1 is highest). */
  priority?: number;
  /** Triton's queue `timeout`, in microseconds. */
  timeoutUs?: number;
  /** Sequence (stateful) models: the correlation id and the START/END flags. */
  sequence?: { id: bigint | number | string; start?: boolean; end?: boolean };
  /** Cancels the request on the server too. */
  signal?: AbortSignal;
  /** A deadline for this call, in milliseconds. */
  timeoutMs?: number;
}

/** An inference's result: its outputs by name, typed. */
export interface InferResult {
  modelName: string;
  modelVersion: string;
  id: string;
  parameters: Record<string, ParameterValue>;
  /** Outputs by name, in response order. */
  outputs: Record<string, OutputTensor>;
  /** The output of that name. @throws when the response has none. */
  output(name: string): OutputTensor;
}

/** A model's entry in the repository index. */
export interface ModelIndexEntry {
  name: string;
  version: string;
  state: string;
  reason: string;
}

/** A tensor as model metadata describes it (`-1`: any size). */
export interface TensorMetadata {
  name: string;
  datatype: string;
  shape: number[];
}

/** Model metadata. */
export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

/** Server metadata. */
export interface ServerMetadata {
  name: string;
  version: string;
  extensions: string[];
}

/** A registered system shared-memory region, as the server reports it. */
export interface SharedMemoryStatus {
  name: string;
  key: string;
  offset: number;
  byteSize: number;
}

/** A registered CUDA shared-memory region, as the server reports it. */
export interface CudaSharedMemoryStatus {
  name: string;
  deviceId: number;
  byteSize: number;
}

/** Per-call options of the non-inference calls. */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** What both {@link createGrpcClient} and {@link createRestClient} offer. */
export interface InferenceClient {
  isServerLive(options?: CallOptions): Promise<boolean>;
  isServerReady(options?: CallOptions): Promise<boolean>;
  isModelReady(model: string, version?: string, options?: CallOptions): Promise<boolean>;
  serverMetadata(options?: CallOptions): Promise<ServerMetadata>;
  modelMetadata(model: string, version?: string, options?: CallOptions): Promise<ModelMetadata>;
  modelConfig(model: string, version?: string, options?: CallOptions): Promise<ModelConfig>;
  /** Statistics of one model (every version), or of every model when `model` is absent. */
  statistics(model?: string, version?: string, options?: CallOptions): Promise<ModelStatisticsResponse>;
  infer(model: string, request: InferOptions): Promise<InferResult>;
  /** The repository index; `ready` lists only READY versions. */
  index(options?: CallOptions & { ready?: boolean }): Promise<ModelIndexEntry[]>;
  /** Load (or reload) a model (explicit model control), optionally with a config and `file:` overrides. */
  load(
    model: string,
    options?: CallOptions & { config?: string | object; files?: Record<string, Uint8Array> },
  ): Promise<void>;
  unload(model: string, options?: CallOptions & { dependents?: boolean }): Promise<void>;
  /** The log settings, after applying `changes` when given. */
  logSettings(
    changes?: Record<string, string | number | boolean>,
    options?: CallOptions,
  ): Promise<Record<string, string | number | boolean>>;
  /**
   * The trace settings (Triton's trace extension), global or of `options.model`, after applying
   * `changes` when given: values are strings, `trace_level` a list of them, `null` clears a
   * setting (it then follows the global setting, or the server's startup value).
   */
  traceSettings(
    changes?: Record<string, string | readonly string[] | null>,
    options?: CallOptions & { model?: string },
  ): Promise<Record<string, string | string[]>>;
  registerSystemSharedMemory(
    name: string,
    key: string,
    byteSize: number,
    offset?: number,
    options?: CallOptions,
  ): Promise<void>;
  /** Unregister one region, or every region when `name` is absent. */
  unregisterSystemSharedMemory(name?: string, options?: CallOptions): Promise<void>;
  systemSharedMemoryStatus(name?: string, options?: CallOptions): Promise<SharedMemoryStatus[]>;
  /**
   * Register CUDA device memory by its IPC handle: the 64 raw bytes of a `cudaIpcMemHandle_t`
   * (sent raw on gRPC, base64 on REST, as Triton's clients do).
   */
  registerCudaSharedMemory(
    name: string,
    rawHandle: Uint8Array,
    deviceId: number,
    byteSize: number,
    options?: CallOptions,
  ): Promise<void>;
  /** Unregister one CUDA region, or every CUDA region when `name` is absent. */
  unregisterCudaSharedMemory(name?: string, options?: CallOptions): Promise<void>;
  cudaSharedMemoryStatus(name?: string, options?: CallOptions): Promise<CudaSharedMemoryStatus[]>;
  /** Close connections. */
  close(): void;
}
