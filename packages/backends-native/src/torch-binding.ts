import { fileURLToPath } from "node:url";
import { requireAddon } from "./binding.js";

/** A tensor crossing into or out of the addon: little-endian, row-major bytes. */
export interface RawTorchTensor {
  datatype: string;
  shape: number[];
  data: Uint8Array;
}

/** One TorchScript module on its own native thread (`native/torch_instance.cc`). */
export interface RawTorchInstance {
  /** Load the module on the instance's thread; rejects with libtorch's message. */
  load(path: string): Promise<{ arguments: { name: string; type: string }[]; returns: string }>;
  /**
   * Run forward on the instance's thread with the inputs as positional arguments. The inputs'
   * bytes are used in place (copied only when misaligned) and must stay attached until it settles.
   */
  execute(inputs: RawTorchTensor[]): Promise<{ outputs: RawTorchTensor[]; inferNs: number }>;
  /** Release the module (and cached device memory), end the thread; later calls reject. */
  close(): Promise<void>;
}

/** Settings of a {@link RawTorchInstance}. */
export interface RawTorchSettings {
  device?: "cpu" | "cuda";
  deviceId?: number;
  inferenceMode?: boolean;
  optimizedExecution?: boolean;
  cacheCleaning?: boolean;
  cudnn?: boolean;
}

/** The raw galley_torch addon, as `native/torch_addon.cc` exports it. Only src/torch.ts uses it. */
export interface TorchBinding {
  /** Bumped whenever the exports below change shape. */
  abiVersion: number;
  /** The libtorch it was built against (`1.13.0`). */
  torchVersion: string;
  /** Whether it was built against a libtorch with CUDA (libtorch_cuda). */
  cudaCompiled: boolean;
  /** GPUs libtorch can use (0 without CUDA). */
  cudaDeviceCount(): number;
  TorchInstance: new (settings: RawTorchSettings) => RawTorchInstance;
}

/** The ABI these wrappers were written against. */
export const TORCH_BINDING_ABI_VERSION = 1;

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
  "then build the addon: npm run build -w @galley/backends-native (node-gyp builds galley_torch.node where libtorch is found),",
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
