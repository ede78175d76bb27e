import {
  loadedTorchBinding,
  loadTorchBinding,
  type RawDeviceTensor,
  type RawTorchExecuteOptions,
  type RawTorchInput,
  type RawTorchInstance,
  type RawTorchLoaded,
  type RawTorchResult,
} from "./torch-binding.js";

/**
 * A tensor the addon keeps where a model made it (on its GPU): see {@link TorchModel.execute}'s
 * `resident` option. Give it to another model on the same device as `{ tensor }`, read it with
 * `toHost()`, copy it into device memory with `copyTo()`, and `dispose()` it when done.
 */
export type TorchDeviceTensor = RawDeviceTensor;

/**
 * An input of {@link TorchModel.execute}: bytes (`data`), device memory used in place (`pointer`,
 * `deviceId`, `byteLength`: a CUDA shared-memory region on the model's GPU; the caller checks the
 * range), a kept tensor (`tensor`, on the model's device), or `parts` of a batch concatenated on
 * the model's device.
 */
export type TorchInput = RawTorchInput;

/** What {@link TorchModel.execute} returns, with the bytes it copied across the host. */
export type TorchResult = RawTorchResult;

/** Where and how a {@link TorchModel} runs (Triton's PyTorch backend parameters). */
export interface TorchModelOptions {
  /**
   * `torchscript` (default): a file saved by `torch.jit.save`. `aoti`: an AOTInductor package
   * (`torch._inductor.aoti_compile_and_package`), compiled for this device kind and this torch.
   */
  format?: "torchscript" | "aoti";
  /** `cpu` (default) or `cuda`, on GPU `deviceId` (default 0). */
  device?: "cpu" | "cuda";
  deviceId?: number;
  /** `INFERENCE_MODE`: run under c10::InferenceMode (default true), else only without gradients. */
  inferenceMode?: boolean;
  /** `DISABLE_OPTIMIZED_EXECUTION` inverted: the TorchScript graph executor's optimizations (default true). */
  optimizedExecution?: boolean;
  /** `ENABLE_CACHE_CLEANING`: empty the CUDA caching allocator after each execution (default false). */
  cacheCleaning?: boolean;
  /** `DISABLE_CUDNN` inverted (default true). */
  cudnn?: boolean;
  /**
   * On a GPU, run forward as CUDA graphs (default false): a call {@link TorchModel.execute} allows
   * (`graph: true`) runs eagerly for the first 3 calls of its input shapes, is captured on the
   * 4th and replayed from then on — one launch instead of one per operation. A module that cannot
   * be captured (it waits for the GPU, say with `.item()`) runs eagerly, and the result says why.
   * Replays give the captured computation: only for modules whose work depends on the inputs'
   * shapes and values alone.
   */
  cudaGraphs?: boolean;
  /** The most graphs (distinct input shapes) a model keeps, each holding its own GPU memory (default 16, at most 4096). */
  cudaGraphLimit?: number;
}

/** Options of {@link TorchModel.execute}. */
export interface TorchExecuteOptions {
  /** Output positions to keep where the model made them, as {@link TorchDeviceTensor} handles. */
  resident?: readonly number[];
  /** The call may run as a CUDA graph (see {@link TorchModelOptions.cudaGraphs}). */
  graph?: boolean;
  /**
   * Deferred completion (GPU): when every output stays (`resident`), answer once the work is
   * queued, not done. The handles then carry the event that ends it (`readyEvent`, `whenReady()`),
   * their own copies wait for it, and memory read in place (`pointer` inputs) must not be reused
   * before it fires.
   */
  defer?: boolean;
}

/** A forward argument (without `self`). */
export interface TorchArgument {
  name: string;
  /** TorchScript's type (`Tensor`, `List[Tensor]`, ...). */
  type: string;
}

/** A loaded TorchScript module or AOTInductor package on its own native thread. */
export interface TorchModel {
  readonly format: "torchscript" | "aoti";
  /** TorchScript: forward's arguments, in order (without `self`); empty for a package. */
  readonly arguments: readonly TorchArgument[];
  /** TorchScript: forward's return type as TorchScript writes it (`Tensor`, `(Tensor, Tensor)`, `Tensor[]`). */
  readonly returns: string;
  /**
   * AOTInductor: the package's call spec, `[inputs, outputs]`, each PyTorch's pytree spec as JSON
   * (`[1, {"type": "builtins.tuple", "context": ..., "children_spec": [...]}]`): the inputs are
   * the tuple `(args, kwargs)`. A package takes and returns its tensors flattened in this order.
   */
  readonly callSpec?: readonly string[];
  /** AOTInductor: the package's metadata (`AOTI_DEVICE_KEY`: `cpu` or `cuda`, `AOTI_CPU_ISA`, ...). */
  readonly metadata?: Readonly<Record<string, string>>;
  /**
   * Run forward with `inputs` as its positional arguments, on the model's thread; outputs are the
   * returned tensor, or the tuple's / list's tensors in order. Each output's bytes belong to it
   * alone (an output sharing an input's or the model's memory is copied). Rejects with libtorch's
   * message when the model fails. The inputs' buffers must not be detached until it settles.
   * Outputs at the positions in `resident` are kept where the model made them (its GPU) and come
   * back as {@link TorchDeviceTensor} handles instead of bytes. Throws a TypeError / RangeError
   * synchronously for an input that cannot be taken: device memory on another GPU or given to a
   * CPU model, a kept tensor of another device or datatype, sizes that do not fit the shape.
   * With `graph` (and the model's `cudaGraphs`), the call may run as a CUDA graph.
   */
  execute(inputs: readonly TorchInput[], options?: TorchExecuteOptions): Promise<TorchResult>;
  /** Release the module and end its thread. */
  close(): Promise<void>;
  /**
   * The model's number among the process's open models: another thread runs it with
   * {@link torchDirect}'s `execute(id, ...)` without going through this one.
   */
  readonly id: number;
}

/** Runs models loaded by another thread of this process (see {@link torchDirect}). */
export interface TorchDirect {
  /**
   * {@link TorchModel.execute} on the open model numbered `id`, from this thread: queued on the
   * model's thread with its other calls, answered here; kept outputs (`resident`) are handles of
   * this thread, given back to models of the same device from it. Rejects with an error
   * whose `code` is `TORCH_INSTANCE_CLOSED` when no such model is open (closed, or never made);
   * calls queued before its `close()` still run.
   */
  execute(id: number, inputs: readonly TorchInput[], options?: TorchExecuteOptions): Promise<TorchResult>;
}

let direct: TorchDirect | undefined;

/**
 * This thread's way to run models another thread loaded (a worker thread running a model that
 * the main thread loaded, without a message through the main thread). Throws the addon's install
 * message when libtorch is missing. A thread that ends waits for its calls still running.
 *
 * @example
 * // main thread: postMessage({ id: model.id }); in a worker:
 * const { outputs } = await torchDirect().execute(id, [{ datatype: "FP32", shape: [3], data }]);
 */
export function torchDirect(): TorchDirect {
  if (!direct) {
    const raw = new (loadTorchBinding().TorchDirect)();
    direct = {
      execute: (id, inputs, options) => raw.execute(id, [...inputs], rawOptions(options)),
    };
  }
  return direct;
}

/** Whether the PyTorch backend can run here; never throws. */
export interface TorchSupport {
  available: boolean;
  /** Why not, and what to install (when not available). */
  reason?: string;
  /** libtorch's version (when available). */
  version?: string;
  /** Built against a libtorch with CUDA. */
  cudaCompiled?: boolean;
  /** Can load AOTInductor packages (`model.pt2`): built against libtorch 2.x. */
  aoti?: boolean;
  /** GPUs libtorch can use. */
  cudaDevices?: number;
}

/**
 * Whether the torch addon loads here, with libtorch's version and GPUs.
 *
 * @example
 * const torch = torchSupport();
 * console.log(torch.available ? `libtorch ${torch.version}, ${torch.cudaDevices} GPU(s)` : torch.reason);
 */
export function torchSupport(): TorchSupport {
  try {
    const binding = loadTorchBinding();
    return {
      available: true,
      version: binding.torchVersion,
      cudaCompiled: binding.cudaCompiled,
      aoti: binding.aotiCompiled,
      cudaDevices: binding.cudaCompiled ? binding.cudaDeviceCount() : 0,
    };
  } catch (error) {
    return { available: false, reason: (error as Error).message };
  }
}

/** The PyTorch caching allocator's figures for one GPU of this process. */
export interface TorchCudaMemory {
  /** Bytes in tensors now. */
  allocatedBytes: number;
  /** Bytes the allocator holds from the driver (allocated plus its cache). */
  reservedBytes: number;
  /** The most bytes in tensors at once since the last peak reset (each execution on a GPU resets it). */
  peakAllocatedBytes: number;
}

/**
 * The caching allocator's figures for GPU `device` (`c10::cuda::CUDACachingAllocator` device
 * stats); undefined until something in this process loaded the torch addon (a PyTorch model), where
 * libtorch has no CUDA, or for a GPU it does not see. Cheap: a lock and a copy.
 *
 * @example
 * const stats = torchCudaMemory(0);
 * if (stats) console.log(`${stats.reservedBytes - stats.allocatedBytes} bytes cached`);
 */
export function torchCudaMemory(device: number): TorchCudaMemory | undefined {
  const binding = loadedTorchBinding();
  if (!binding?.cudaCompiled) return undefined;
  return binding.cudaMemoryStats(device) ?? undefined;
}

/**
 * Give the caching allocator's unused blocks back to the driver (`emptyCache`), off the JS thread,
 * so that other processes (and NVML's free memory) see them. Nothing until the torch addon was
 * loaded, or without CUDA.
 */
export async function torchEmptyCache(): Promise<void> {
  const binding = loadedTorchBinding();
  if (binding?.cudaCompiled) await binding.cudaEmptyCache();
}

/**
 * Load a TorchScript file (`torch.jit.save`), or with `format: "aoti"` an AOTInductor package
 * (`model.pt2`), on a native thread of its own. Throws the addon's install message when libtorch
 * is missing; rejects with libtorch's message when the file does not load, and with a clear one
 * for a package made for another device kind or processor, or where libtorch has no AOTInductor.
 *
 * @example
 * const model = await loadTorchModel("model.pt", { device: "cpu" });
 * const x = new Float32Array([1, 2, 3]);
 * const { outputs } = await model.execute([{ datatype: "FP32", shape: [3], data: new Uint8Array(x.buffer) }]);
 * await model.close();
 */
export async function loadTorchModel(path: string, options: TorchModelOptions = {}): Promise<TorchModel> {
  const binding = loadTorchBinding();
  const instance: RawTorchInstance = new binding.TorchInstance(options);
  let info: RawTorchLoaded;
  try {
    info = await instance.load(path);
  } catch (error) {
    await instance.close();
    throw error;
  }
  return {
    format: info.format,
    arguments: info.arguments,
    returns: info.returns,
    ...(info.callSpec ? { callSpec: info.callSpec } : {}),
    ...(info.metadata ? { metadata: info.metadata } : {}),
    execute: (inputs, options) => instance.execute([...inputs], rawOptions(options)),
    close: () => instance.close(),
    id: instance.id,
  };
}

/** The addon's form of execute's options (fresh arrays, only what is set). */
function rawOptions(options: TorchExecuteOptions | undefined): RawTorchExecuteOptions | undefined {
  if (!options) return undefined;
  return {
    ...(options.resident ? { resident: [...options.resident] } : {}),
    ...(options.graph ? { graph: true } : {}),
    ...(options.defer ? { defer: true } : {}),
  };
}

export { TORCH_INSTALL_HINT } from "./torch-binding.js";
