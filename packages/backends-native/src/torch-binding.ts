import { fileURLToPath } from "node:url";
import { requireAddon } from "./binding.js";

/** A tensor crossing into or out of the addon: little-endian, row-major bytes. */
export interface RawTorchTensor {
  datatype: string;
  shape: number[];
  data: Uint8Array;
}

/**
 * A libtorch tensor the addon keeps (`native/torch/torch_device_tensor.cc`): an output left where the
 * model made it (on its GPU), to be given to another instance on that device without copies.
 * Made only by {@link RawTorchInstance.execute}; not constructible.
 */
export interface RawDeviceTensor {
  /** The CUDA ordinal, or -1 for a CPU tensor (and once disposed). */
  readonly deviceId: number;
  readonly byteSize: number;
  /** The device address of a contiguous CUDA tensor (another process may map its allocation by CUDA IPC); null otherwise. */
  readonly pointer: bigint | null;
  readonly datatype: string;
  readonly shape: number[];
  readonly disposed: boolean;
  /**
   * When its batch was answered before its GPU work ended (`defer`): the CUDA IPC handle (64 bytes)
   * of the event recorded after that work, for another process to wait on; null otherwise. This
   * handle's own copies wait for it by themselves.
   */
  readonly readyEvent: Uint8Array | null;
  /** Settles once its bytes are complete (at once unless deferred); the host waits off the event loop. */
  whenReady(): Promise<void>;
  /** Rows `[start, start + length)` of the first dimension: a view sharing the storage. */
  narrow(start: number, length: number): RawDeviceTensor;
  /** One device-to-host copy (pinned), off the event loop. */
  toHost(): Promise<Uint8Array>;
  /**
   * One device-to-device copy to `pointer` on the tensor's GPU, or on GPU `deviceId` (libtorch's copy
   * between devices: direct between peers, staged by the driver otherwise); `byteLength` is the room there.
   */
  copyTo(pointer: bigint, byteLength: number, deviceId?: number): Promise<void>;
  /** Drop this handle's reference now (the memory is freed when no handle or job holds it). */
  dispose(): void;
}

/**
 * One input of {@link RawTorchInstance.execute}: host bytes; device memory used in place (a CUDA
 * shared-memory region, `deviceId` must be the instance's GPU); a kept tensor (on the instance's
 * device); or parts (each one of those, with its own shape) concatenated along the first dimension.
 */
export type RawTorchInput =
  | RawTorchTensor
  | {
      datatype: string;
      shape: number[];
      pointer: bigint;
      deviceId: number;
      byteLength: number;
      /** Memory another process wrote: the CUDA IPC handle (64 bytes) of its event recorded after that work. */
      event?: Uint8Array;
    }
  | { datatype: string; shape: number[]; tensor: RawDeviceTensor }
  | { datatype: string; shape: number[]; parts: RawTorchInput[] };

/** One output of {@link RawTorchInstance.execute}: bytes, or a kept tensor when asked (`resident`). */
export type RawTorchOutput =
  | RawTorchTensor
  | { datatype: string; shape: number[]; tensor: RawDeviceTensor; data?: undefined };

/** What one {@link RawTorchInstance.execute} returns. */
export interface RawTorchResult {
  outputs: RawTorchOutput[];
  inferNs: number;
  /** Bytes staged host→device for the inputs and copied device→host for the outputs. */
  hostToDeviceBytes: number;
  deviceToHostBytes: number;
  /** With `graph`: "captured" (this call captured forward as a CUDA graph) or "replayed"; absent when it ran eagerly. */
  cudaGraph?: "captured" | "replayed";
  /** Why capturing failed (the call then ran eagerly): libtorch's or CUDA's message. */
  cudaGraphError?: string;
  /** On a GPU: the caching allocator's peak during the call less what it held before (the batch's working memory). */
  peakBytes?: number;
}

/** Options of {@link RawTorchInstance.execute}: kept output positions, a CUDA graph, deferred completion. */
export interface RawTorchExecuteOptions {
  resident?: number[];
  graph?: boolean;
  defer?: boolean;
}

/** What {@link RawTorchInstance.load} found. */
export interface RawTorchLoaded {
  format: "torchscript" | "aoti";
  /** TorchScript: forward's arguments (without self) and return type (empty for a package). */
  arguments: { name: string; type: string }[];
  returns: string;
  /** AOTInductor: the package's call spec, `[inputs, outputs]` as PyTorch's pytree JSON. */
  callSpec?: string[];
  /** AOTInductor: the package's metadata (`AOTI_DEVICE_KEY`, `AOTI_CPU_ISA`, ...). */
  metadata?: Record<string, string>;
}

/** One TorchScript module or AOTInductor package on its own native thread (`native/torch/torch_instance.cc`). */
export interface RawTorchInstance {
  /** Load the model on the instance's thread; rejects with libtorch's message. */
  load(path: string): Promise<RawTorchLoaded>;
  /**
   * Run forward on the instance's thread with the inputs as positional arguments. The inputs'
   * bytes are used in place (copied only when misaligned) and must stay attached until it settles.
   * Outputs at the `resident` positions stay where the model made them, as handles. With `defer`,
   * a GPU batch whose outputs all stay is answered once its work is queued: its handles carry the
   * event that ends it (`readyEvent`), and inputs it read in place must not be reused before that.
   */
  execute(inputs: RawTorchInput[], options?: RawTorchExecuteOptions): Promise<RawTorchResult>;
  /** Release the module (and cached device memory), end the thread; later calls reject. */
  close(): Promise<void>;
  /** Its number among the process's open instances, for {@link RawTorchDirect.execute}. */
  readonly id: number;
}

/**
 * Calls on instances made by another thread (`native/torch/torch_direct.cc`), one per thread: the job is
 * queued on the instance's thread with its own work, and answered on this thread. A thread that
 * ends waits for its calls still running (they read its bytes).
 */
export interface RawTorchDirect {
  /**
   * As {@link RawTorchInstance.execute} on the open instance numbered `id` (kept outputs are
   * handles of this thread); rejects with code `TORCH_INSTANCE_CLOSED` when there is none (closed,
   * or never made).
   */
  execute(id: number, inputs: RawTorchInput[], options?: RawTorchExecuteOptions): Promise<RawTorchResult>;
}

/** Settings of a {@link RawTorchInstance}. */
export interface RawTorchSettings {
  /** `aoti`: the file is an AOTInductor package (`model.pt2`); default a TorchScript file. */
  format?: "torchscript" | "aoti";
  device?: "cpu" | "cuda";
  deviceId?: number;
  inferenceMode?: boolean;
  optimizedExecution?: boolean;
  cacheCleaning?: boolean;
  cudnn?: boolean;
  cudaGraphs?: boolean;
  cudaGraphLimit?: number;
}

/** The raw galley_torch addon, as `native/torch/torch_addon.cc` exports it. Only src/torch.ts uses it. */
export interface TorchBinding {
  /** Bumped whenever the exports below change shape. */
  abiVersion: number;
  /** The libtorch it was built against (`1.13.0`). */
  torchVersion: string;
  /** Whether it can load AOTInductor packages (built against libtorch 2.x). */
  aotiCompiled: boolean;
  /** Whether it was built against a libtorch with CUDA (libtorch_cuda). */
  cudaCompiled: boolean;
  /** GPUs libtorch can use (0 without CUDA). */
  cudaDeviceCount(): number;
  /** The caching allocator's figures for one GPU; null without CUDA or for a GPU libtorch does not see. */
  cudaMemoryStats(device: number): { allocatedBytes: number; reservedBytes: number; peakAllocatedBytes: number } | null;
  /** `emptyCache()`: the allocator's unused blocks back to the driver, off the JS thread (nothing without CUDA). */
  cudaEmptyCache(): Promise<void>;
  TorchInstance: new (settings: RawTorchSettings) => RawTorchInstance;
  TorchDirect: new () => RawTorchDirect;
}

/** The ABI these wrappers were written against. */
export const TORCH_BINDING_ABI_VERSION = 8;

/** Where the torch addon may be: an explicit override first, then node-gyp's build folders. */
export function torchBindingCandidates(): string[] {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const fromEnv = process.env.GALLEY_TORCH_BINDING;
  return [
    ...(fromEnv ? [fromEnv] : []),
    `${root}build/Release/galley_torch.node`,
    `${root}build/Debug/galley_torch.node`,
  ];
}

/** What to do when the torch addon is missing: the one message a failed load carries. */
export const TORCH_INSTALL_HINT = [
  "The PyTorch backend needs libtorch and Galley's torch addon, built against it. Install libtorch, one of:",
  "  - Debian/Ubuntu (CPU): apt-get install libtorch-dev",
  "  - the torch Python package: pip install torch (the torch that `python3` imports is used)",
  "  - a libtorch folder from pytorch.org: LIBTORCH=/path/to/libtorch",
  "then build the addon (node-gyp builds galley_torch.node where libtorch is found): `npm rebuild @galley/backends-native`",
  "where it is installed, or `npm run build -w @galley/backends-native` in Galley's repository;",
  "or point GALLEY_TORCH_BINDING at a built galley_torch.node.",
].join("\n");

let cached: TorchBinding | undefined;

/**
 * Load the torch addon on first use. Tries each candidate in order and, if none loads, throws one
 * error listing every attempt and saying what to install. Nothing loads at import time.
 */
export function loadTorchBinding(candidates: string[] = torchBindingCandidates()): TorchBinding {
  cached ??= requireAddon<TorchBinding>(
    candidates,
    TORCH_BINDING_ABI_VERSION,
    "Galley's torch addon (galley_torch.node)",
    [TORCH_INSTALL_HINT],
  );
  return cached;
}

/** The torch addon when something in this process has loaded it already; never loads it (libtorch is large). */
export function loadedTorchBinding(): TorchBinding | undefined {
  return cached;
}
