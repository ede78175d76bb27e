import type { ModelConfig, ModelOutput, ModelRateLimiter } from "@galley/proto";
import { now } from "../../clock/clock.js";
import { InferenceError } from "../../core/errors.js";
import type { InferenceRequest } from "../../core/inference-request.js";
import type { Tensor } from "../../core/tensor.js";
import type { Logger } from "../../log.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { gatherInput, scatterOutput } from "../batch-io.js";
import { checkOutputs, type OutputRules, outputRules } from "../check-outputs.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import { type NativeInstance, nativeTransport } from "../host/native-transport.js";
import { outputIndexMessage, TORCH_PROTOCOL_TYPES, type TorchIO } from "./pytorch-io.js";
import type { TorchInstanceSettings, TorchProtocol, TorchWireTensor } from "./pytorch-messages.js";

/** What the backend needs of `@galley/backends-native/torch`. */
export interface TorchAddon {
  loadTorchModel(
    path: string,
    options: TorchInstanceSettings,
  ): Promise<{
    arguments: readonly { name: string; type: string }[];
    returns: string;
    execute(inputs: readonly TorchWireTensor[]): Promise<{ outputs: TorchWireTensor[]; inferNs: number }>;
    close(): Promise<void>;
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
}

/** One TorchScript module on its own native thread, as a `NativeInstance` for the host. */
function torchNative(torch: TorchAddon): NativeInstance<TorchProtocol> {
  let model: Awaited<ReturnType<TorchAddon["loadTorchModel"]>> | undefined;
  let closed = false;
  return {
    async start(init) {
      const loaded = await torch.loadTorchModel(init.path, init.settings);
      if (closed) {
        await loaded.close();
        throw new Error("was closed while loading");
      }
      model = loaded;
      return { arguments: loaded.arguments, returns: loaded.returns };
    },
    async execute(batch) {
      if (!model) return { error: "the model is not loaded" };
      try {
        return await model.execute(batch.inputs);
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
 * One instance of a PyTorch model: gathers the batch into forward's arguments (Triton's naming
 * conventions, see `mapTorchIO`), runs it on the module's native thread through the instance
 * host, and splits the returned tensors per request.
 */
export class PyTorchInstance implements BackendInstance {
  readonly name: string;
  readonly rateLimiter?: ModelRateLimiter;
  readonly #host: InstanceHost<TorchProtocol>;
  readonly #config: ModelConfig;
  readonly #io: TorchIO;
  readonly #batching: boolean;
  readonly #inputs: Map<string, ModelConfig["input"][number]>;
  readonly #outputs: Map<string, ModelOutput>;
  readonly #rules: OutputRules;

  private constructor(
    host: InstanceHost<TorchProtocol>,
    config: ModelConfig,
    io: TorchIO,
    rateLimiter?: ModelRateLimiter,
  ) {
    this.name = host.name;
    if (rateLimiter) this.rateLimiter = rateLimiter;
    this.#host = host;
    this.#config = config;
    this.#io = io;
    this.#batching = config.maxBatchSize > 0;
    this.#inputs = new Map(config.input.map((i) => [i.name, i]));
    this.#outputs = new Map(config.output.map((o) => [o.name, o]));
    this.#rules = outputRules(config);
  }

  /**
   * Load the module on a fresh native thread and map the config onto its forward; rejects with
   * libtorch's message, or Triton's when the config and the module do not match.
   */
  static async start(
    options: PyTorchInstanceOptions,
    mapIO: (forward: TorchProtocol["info"]) => TorchIO,
  ): Promise<PyTorchInstance> {
    const host = createInstanceHost<TorchProtocol>({
      name: options.name,
      model: options.config.name,
      transport: nativeTransport(() => torchNative(options.torch)),
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
    return new PyTorchInstance(host, options.config, io, options.rateLimiter);
  }

  /** False while the instance is down (restarting after a failure). */
  get healthy(): boolean {
    return this.#host.health === "up";
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    const batchSizes = requests.map((r) => (this.#batching ? (r.inputs[0]?.shape[0] ?? 1) : 1));
    const args: (TorchWireTensor | undefined)[] = new Array(this.#io.arguments.length);
    try {
      for (const [name, position] of this.#io.inputs) {
        const tensor = gatherInput(requests, name, this.#batching);
        if (!tensor) continue;
        if (!TORCH_PROTOCOL_TYPES.has(tensor.datatype)) {
          throw new InferenceError("TORCH_UNSUPPORTED_DATATYPE", { datatype: tensor.datatype, input: name });
        }
        const reshape = this.#inputs.get(name)?.reshape?.shape.map(Number);
        const shape = reshape ? (this.#batching ? [tensor.shape[0] ?? 1, ...reshape] : reshape) : tensor.shape;
        args[position] = { datatype: tensor.datatype, shape, data: tensor.data };
      }
      const missing = this.#io.arguments.findIndex((_, i) => args[i] === undefined);
      if (missing >= 0) {
        throw new InferenceError("TORCH_INPUT_MISSING", {
          index: missing,
          argument: this.#io.arguments[missing] ?? "",
          model: this.#config.name,
        });
      }
    } catch (error) {
      return failed(requests, error as Error, now() - start);
    }
    const inputDone = now();
    let returned: TorchWireTensor[];
    try {
      const result = await this.#host.execute({ inputs: args as TorchWireTensor[] });
      if ("error" in result) throw new InferenceError("TORCH_EXECUTE_FAILED", { message: result.error });
      returned = result.outputs;
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const inferDone = now();
    const perRequest: Tensor[][] = requests.map(() => []);
    try {
      for (const [name, index] of this.#io.outputs) {
        const wire = returned[index];
        if (!wire) {
          throw new InferenceError("TORCH_OUTPUT_INDEX", { message: outputIndexMessage(name, returned.length) });
        }
        const tensor = outputTensor(name, wire, this.#outputs.get(name), this.#batching);
        for (const [i, part] of scatterOutput(tensor, batchSizes).entries()) perRequest[i]?.push(part);
      }
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const responses = requests.map((request, i) => {
      let outputs = perRequest[i] ?? [];
      if (request.outputs.length > 0) {
        const byName = new Map(outputs.map((o) => [o.name, o]));
        outputs = request.outputs.flatMap((o) => byName.get(o.name) ?? []);
      } else {
        outputs = outputs.filter((o) => this.#outputs.has(o.name));
      }
      return checkOutputs(this.#rules, request, outputs) ?? outputs;
    });
    return {
      responses,
      computeInputNs: inputDone - start,
      computeInferNs: inferDone - inputDone,
      computeOutputNs: now() - inferDone,
    };
  }

  /** Release the module and end its thread (after the batch it runs, if any). */
  close(graceMs?: number): Promise<void> {
    return this.#host.close(graceMs);
  }
}

/** A returned tensor as an output, with the config's shape where the output is reshaped. */
function outputTensor(name: string, wire: TorchWireTensor, spec: ModelOutput | undefined, batching: boolean): Tensor {
  let shape = wire.shape;
  if (spec?.reshape) {
    const dims = spec.dims.map(Number);
    const batch = batching ? [wire.shape[0] ?? 1] : [];
    const total = wire.shape.slice(batch.length).reduce((a, b) => a * b, 1);
    const known = dims.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
    shape = [...batch, ...dims.map((d) => (d === -1 ? total / known : d))];
  }
  return {
    name,
    datatype: wire.datatype as Tensor["datatype"],
    shape,
    data: wire.data,
    parameters: {},
    // The bytes belong to libtorch's tensor until collected: copied, not moved, to a worker.
    movable: false,
  };
}

function failed(requests: readonly InferenceRequest[], error: Error, inputNs: bigint): ExecuteResult {
  return { responses: requests.map(() => error), computeInputNs: inputNs, computeInferNs: 0n, computeOutputNs: 0n };
}
