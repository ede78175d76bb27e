// The PyTorch backend's payloads on the instance host's messages. Instances run on native
// threads in this process (host/native-transport.ts), so tensors pass as they are.
import type { ForwardSignature } from "./pytorch-io.js";

/** A tensor to or from libtorch: a protocol datatype, a shape, little-endian row-major bytes. */
export interface TorchWireTensor {
  datatype: string;
  shape: number[];
  data: Uint8Array;
}

/** A tensor the torch addon kept on the instance's device (`TorchDeviceTensor` of backends-native). */
export interface TorchKeptTensor {
  /** The CUDA ordinal, -1 on the CPU or once disposed. */
  readonly deviceId: number;
  readonly byteSize: number;
  /** Its device address here (contiguous CUDA tensors; null otherwise, absent from older addons). */
  readonly pointer?: bigint | null;
  readonly datatype: string;
  readonly shape: number[];
  readonly disposed: boolean;
  /** A deferred batch's output: the CUDA IPC handle of the event after which its bytes are complete (addon ABI 8). */
  readonly readyEvent?: Uint8Array | null;
  /** Settles once its bytes are complete (addon ABI 8). */
  whenReady?(): Promise<void>;
  narrow(start: number, length: number): TorchKeptTensor;
  toHost(): Promise<Uint8Array>;
  /** One device-to-device copy to `pointer` on its GPU, or on GPU `deviceId` (addon ABI 7). */
  copyTo(pointer: bigint, byteLength: number, deviceId?: number): Promise<void>;
  dispose(): void;
}

/**
 * An argument for libtorch: bytes, client device memory used in place, a kept tensor, or the
 * parts of a batch the addon concatenates on the instance's device.
 */
export type TorchWireInput =
  | TorchWireTensor
  | { datatype: string; shape: number[]; pointer: bigint; deviceId: number; byteLength: number; event?: Uint8Array }
  | { datatype: string; shape: number[]; tensor: TorchKeptTensor }
  | { datatype: string; shape: number[]; parts: TorchWireInput[] };

/** A returned tensor: bytes, or a kept tensor at a position the batch asked to keep (`resident`). */
export type TorchWireOutput =
  | TorchWireTensor
  | { datatype: string; shape: number[]; tensor: TorchKeptTensor; data?: undefined };

/** What one execution returns. */
export interface TorchExecution {
  outputs: TorchWireOutput[];
  inferNs: number;
  /** Bytes staged host→device and copied device→host (0 on the CPU). */
  hostToDeviceBytes?: number;
  deviceToHostBytes?: number;
  /** "captured" or "replayed" when the batch ran as a CUDA graph; why a capture failed. */
  cudaGraph?: "captured" | "replayed";
  cudaGraphError?: string;
  /** On a GPU: the allocator's peak during the batch less what it held before. */
  peakBytes?: number;
}

/** Where and how an instance runs its module (the config's parameters and instance group). */
export interface TorchInstanceSettings {
  /** `aoti` for an AOTInductor package (`platform: "torch_aoti"`); a TorchScript file when absent. */
  format?: "torchscript" | "aoti";
  device: "cpu" | "cuda";
  deviceId: number;
  inferenceMode: boolean;
  optimizedExecution: boolean;
  cacheCleaning: boolean;
  cudnn: boolean;
  /** `optimization.cuda.graphs` on a GPU instance, and the most graphs it keeps (see cuda-graphs.ts). */
  cudaGraphs?: boolean;
  cudaGraphLimit?: number;
}

/** The PyTorch backend's payloads (see `InstanceProtocol`). */
export interface TorchProtocol {
  init: { path: string; settings: TorchInstanceSettings };
  info: ForwardSignature;
  /** forward's arguments, in order, and the returned positions to keep on the device. */
  batch: { inputs: TorchWireInput[]; resident?: number[]; graph?: boolean; defer?: boolean };
  /** The returned tensors in order, or libtorch's error. */
  result: TorchExecution | { error: string };
  response: never;
  toInstance: never;
  fromInstance: never;
}
