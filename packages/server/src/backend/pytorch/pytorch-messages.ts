// The PyTorch backend's payloads on the instance host's messages. Instances run on native
// threads in this process (host/native-transport.ts), so tensors pass as they are.
import type { ForwardSignature } from "./pytorch-io.js";

/** A tensor to or from libtorch: a protocol datatype, a shape, little-endian row-major bytes. */
export interface TorchWireTensor {
  datatype: string;
  shape: number[];
  data: Uint8Array;
}

/** Where and how an instance runs its module (the config's parameters and instance group). */
export interface TorchInstanceSettings {
  device: "cpu" | "cuda";
  deviceId: number;
  inferenceMode: boolean;
  optimizedExecution: boolean;
  cacheCleaning: boolean;
  cudnn: boolean;
}

/** The PyTorch backend's payloads (see `InstanceProtocol`). */
export interface TorchProtocol {
  init: { path: string; settings: TorchInstanceSettings };
  info: ForwardSignature;
  /** forward's arguments, in order. */
  batch: { inputs: TorchWireTensor[] };
  /** The returned tensors in order, or libtorch's error. */
  result: { outputs: TorchWireTensor[]; inferNs: number } | { error: string };
  response: never;
  toInstance: never;
  fromInstance: never;
}
