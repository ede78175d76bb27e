import type { ModelConfig, ModelRateLimiter } from "@galley/proto";
import { hostTransfers } from "../../base/host-transfers.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import { type NativeInstance, nativeTransport } from "../host/native-transport.js";
import type { CudaGraphPlan } from "./cuda-graphs.js";
import { TorchBatches, type TorchBatchHooks } from "./pytorch-batch.js";
import type { TorchIO } from "./pytorch-io.js";
import type { TorchExecution, TorchInstanceSettings, TorchProtocol, TorchWireInput } from "./pytorch-messages.js";

/** What the backend needs of `@galley/backends-native/torch`. */
export interface TorchAddon {
  loadTorchModel(
    path: string,
    options: TorchInstanceSettings,
  ): Promise<{
    format?: "torchscript" | "aoti";
    arguments: readonly { name: string; type: string }[];
    returns: string;
    callSpec?: readonly string[];
    metadata?: Readonly<Record<string, string>>;
    execute(
      inputs: readonly TorchWireInput[],
      options?: { resident?: readonly number[]; graph?: boolean; defer?: boolean },
    ): Promise<TorchExecution>;
    close(): Promise<void>;
    /** Its number among the process's open modules (see `torchDirect` of the addon). */
    readonly id: number;
  }>;
}

/** Options for {@link PyTorchInstance.start}. */
export interface PyTorchInstanceOptions {
  /** `<group>_<n>`. */
  name: string;
  config: ModelConfig;
  /** The model file. */
  path: string;
  settings: TorchInstanceSettings;
  torch: TorchAddon;
  log: Logger;
  rateLimiter?: ModelRateLimiter | undefined;
  signal?: AbortSignal | undefined;
  /** On a GPU with `optimization.cuda.graphs`: which batches may run as CUDA graphs. */
  graphs?: CudaGraphPlan | undefined;
}

/** One TorchScript module or AOTInductor package on its own native thread, as a `NativeInstance` for the host. */
interface TorchNative extends NativeInstance<TorchProtocol> {
  /** The loaded module's number in the addon's registry; undefined until loaded and once closed. */
  readonly id: number | undefined;
}

function torchNative(torch: TorchAddon): TorchNative {
  let model: Awaited<ReturnType<TorchAddon["loadTorchModel"]>> | undefined;
  let closed = false;
  return {
    get id() {
      return model?.id;
    },
    async start(init) {
      const loaded = await torch.loadTorchModel(init.path, init.settings);
      if (closed) {
        await loaded.close();
        throw new Error("was closed while loading");
      }
      model = loaded;
      return {
        arguments: loaded.arguments,
        returns: loaded.returns,
        ...(loaded.format ? { format: loaded.format } : {}),
        ...(loaded.callSpec ? { callSpec: loaded.callSpec } : {}),
        ...(loaded.metadata ? { metadata: loaded.metadata } : {}),
      };
    },
    async execute(batch) {
      if (!model) return { error: "the model is not loaded" };
      try {
        const options = {
          ...(batch.resident ? { resident: batch.resident } : {}),
          ...(batch.graph ? { graph: true } : {}),
          ...(batch.defer ? { defer: true } : {}),
        };
        return await model.execute(batch.inputs, options);
      } catch (error) {
        return { error: (error as Error).message };
      }
    },
    async close() {
      closed = true;
      await model?.close();
      model = undefined;
    },
  };
}

/**
 * One instance of a PyTorch model: runs batches ({@link TorchBatches}) on the module's native
 * thread through the instance host, which restarts the module after a failure.
 */
export class PyTorchInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #host: InstanceHost<TorchProtocol>;
  /** The module now running under the host (a restart makes a new one). */
  readonly #native: () => TorchNative | undefined;
  readonly #batches: TorchBatches;
  readonly #hooks: TorchBatchHooks;
  /** How the config meets forward, and the GPU this instance runs on (undefined on the CPU). */
  readonly io: TorchIO;
  readonly device: number | undefined;
  /**
   * On a GPU, two batches at once: the native thread runs the second while the first one's
   * results wait for the event loop (measured on the H200: a batch took 5 ms from dispatch to
   * results for ~0.9 ms of work on its thread). On the CPU the thread is the work: one.
   */
  readonly depth: number;

  private constructor(
    host: InstanceHost<TorchProtocol>,
    native: () => TorchNative | undefined,
    options: PyTorchInstanceOptions,
    io: TorchIO,
  ) {
    const { config, settings, log } = options;
    this.device = settings.device === "cuda" ? settings.deviceId : undefined;
    this.depth = this.device === undefined ? 1 : 2;
    this.name = host.name;
    if (options.rateLimiter) this.rateLimiter = options.rateLimiter;
    this.#host = host;
    this.#native = native;
    this.io = io;
    this.#batches = new TorchBatches(config, io, this.device, options.graphs);
    this.#hooks = {
      name: host.name,
      log,
      transfers: (counts) => hostTransfers.record(config.name, counts),
      queued: this.depth > 1,
    };
  }

  /**
   * Load the module on a fresh native thread and map the config onto its forward; rejects with
   * libtorch's message, or Triton's when the config and the module do not match.
   */
  static async start(
    options: PyTorchInstanceOptions,
    mapIO: (forward: TorchProtocol["info"]) => TorchIO,
  ): Promise<PyTorchInstance> {
    let current: TorchNative | undefined;
    const host = createInstanceHost<TorchProtocol>({
      name: options.name,
      model: options.config.name,
      transport: nativeTransport(() => {
        current = torchNative(options.torch);
        return current;
      }),
      init: { path: options.path, settings: options.settings },
      log: options.log,
    });
    const info = await host.start(options.signal);
    let io: TorchIO;
    try {
      io = mapIO(info);
    } catch (error) {
      await host.close(0);
      throw error;
    }
    return new PyTorchInstance(host, () => current, options, io);
  }

  /** False while the instance is down (restarting after a failure). */
  get healthy(): boolean {
    return this.#host.health === "up";
  }

  /**
   * The running module's number for calls from other threads (`torchDirect`), while the
   * instance is up; a restart gives a new one, and calls with the old one are refused.
   */
  get directId(): number | undefined {
    return this.healthy ? this.#native()?.id : undefined;
  }

  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    return this.#batches.run(requests, (batch) => this.#host.execute(batch), this.#hooks);
  }

  /** Release the module and end its thread (after the batch it runs, if any). */
  close(graceMs?: number): Promise<void> {
    return this.#host.close(graceMs);
  }
}
