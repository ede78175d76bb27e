import type { ModelConfig, ModelOutput, ModelRateLimiter } from "@galley/proto";
import { now } from "../../clock/clock.js";
import { InferenceError } from "../../core/errors.js";
import { hostTransfers } from "../../core/host-transfers.js";
import type { InferenceRequest } from "../../core/inference-request.js";
import { type DeviceTensor, NO_BYTES, type Tensor } from "../../core/tensor.js";
import type { Logger } from "../../log.js";
import type { BackendInstance, ExecuteResult } from "../backend.js";
import { scatterOutput } from "../batch-io.js";
import { checkOutputs, type OutputRules, outputRules } from "../check-outputs.js";
import { createInstanceHost, type InstanceHost } from "../host/instance-host.js";
import { type NativeInstance, nativeTransport } from "../host/native-transport.js";
import { batchShapes, type CudaGraphPlan, describeShapes } from "./cuda-graphs.js";
import { outputIndexMessage, TORCH_PROTOCOL_TYPES, type TorchIO } from "./pytorch-io.js";
import type {
  TorchExecution,
  TorchInstanceSettings,
  TorchKeptTensor,
  TorchProtocol,
  TorchWireInput,
  TorchWireOutput,
} from "./pytorch-messages.js";

/** What the backend needs of `@galley/backends-native/torch`. */
export interface TorchAddon {
  loadTorchModel(
    path: string,
    options: TorchInstanceSettings,
  ): Promise<{
    arguments: readonly { name: string; type: string }[];
    returns: string;
    execute(
      inputs: readonly TorchWireInput[],
      options?: { resident?: readonly number[]; graph?: boolean },
    ): Promise<TorchExecution>;
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
  /** On a GPU with `optimization.cuda.graphs`: which batches may run as CUDA graphs. */
  graphs?: CudaGraphPlan | undefined;
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
        const options = {
          ...(batch.resident ? { resident: batch.resident } : {}),
          ...(batch.graph ? { graph: true } : {}),
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
  /** The GPU this instance runs on; undefined on the CPU. */
  readonly #device: number | undefined;
  /**
   * On a GPU, two batches at once: the native thread runs the second while the first one's
   * results wait for the event loop (measured on the H200: a batch took 5 ms from dispatch to
   * results for ~0.9 ms of work on its thread). On the CPU the thread is the work: one.
   */
  readonly depth: number;
  readonly #log: Logger;
  readonly #graphs: CudaGraphPlan | undefined;

  private constructor(
    host: InstanceHost<TorchProtocol>,
    config: ModelConfig,
    io: TorchIO,
    settings: TorchInstanceSettings,
    log: Logger,
    rateLimiter?: ModelRateLimiter,
    graphs?: CudaGraphPlan,
  ) {
    this.#graphs = graphs;
    this.#device = settings.device === "cuda" ? settings.deviceId : undefined;
    this.depth = this.#device === undefined ? 1 : 2;
    this.#log = log;
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
    return new PyTorchInstance(
      host,
      options.config,
      io,
      options.settings,
      options.log,
      options.rateLimiter,
      options.graphs,
    );
  }

  /** False while the instance is down (restarting after a failure). */
  get healthy(): boolean {
    return this.#host.health === "up";
  }

  async execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    const start = now();
    const batchSizes = requests.map((r) => (this.#batching ? (r.inputs[0]?.shape[0] ?? 1) : 1));
    const args: (TorchWireInput | undefined)[] = new Array(this.#io.arguments.length);
    let onDevice = 0;
    try {
      for (const [name, position] of this.#io.inputs) {
        const reshape = this.#inputs.get(name)?.reshape?.shape.map(Number);
        const shaped = (shape: number[]) =>
          reshape ? (this.#batching ? [shape[0] ?? 1, ...reshape] : reshape) : shape;
        const parts = requests.map((r) => r.inputs.find((i) => i.name === name));
        if (parts.length > 1 || parts.some((p) => p?.device)) {
          // Several requests, or some of the batch on the device: the addon gathers the parts on
          // its own thread (into its pinned stage on a GPU, one copy to the device), not the event loop.
          const wire = deviceArgument(name, parts, this.#batching, shaped);
          onDevice += parts.reduce((n, p) => n + (p?.device?.byteSize ?? 0), 0);
          args[position] = wire;
          continue;
        }
        const tensor = parts[0];
        if (!tensor) continue;
        if (!TORCH_PROTOCOL_TYPES.has(tensor.datatype)) {
          throw new InferenceError("TORCH_UNSUPPORTED_DATATYPE", { datatype: tensor.datatype, input: name });
        }
        args[position] = { datatype: tensor.datatype, shape: shaped(tensor.shape), data: tensor.data };
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
    const resident = this.#resident(requests);
    const shapes = this.#graphs ? batchShapes(requests, this.#batching) : undefined;
    const inputDone = now();
    let result: TorchExecution;
    try {
      const answer = await this.#host.execute({
        inputs: args as TorchWireInput[],
        ...(resident.length > 0 ? { resident } : {}),
        ...(shapes && this.#graphs?.allows(shapes) ? { graph: true } : {}),
      });
      if ("error" in answer) throw new InferenceError("TORCH_EXECUTE_FAILED", { message: answer.error });
      result = answer;
      if (result.cudaGraph === "captured") {
        this.#log.info(`${this.name}: captured a CUDA graph for ${describeShapes(shapes ?? new Map())}`);
      }
      if (result.cudaGraphError) {
        this.#log.warn(
          `${this.name}: could not capture a CUDA graph for ${describeShapes(shapes ?? new Map())}, runs eagerly: ${result.cudaGraphError}`,
        );
      }
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const returned = result.outputs;
    const inferDone = now();
    const model = this.#config.name;
    const perRequest: Tensor[][] = requests.map(() => []);
    try {
      for (const [name, index] of this.#io.outputs) {
        const wire = returned[index];
        if (!wire) {
          throw new InferenceError("TORCH_OUTPUT_INDEX", { message: outputIndexMessage(name, returned.length) });
        }
        const tensor = outputTensor(name, wire, this.#outputs.get(name), this.#batching, model);
        if (tensor.device) onDevice += tensor.device.byteSize;
        for (const [i, part] of scatterKept(tensor, batchSizes).entries()) perRequest[i]?.push(part);
      }
    } catch (error) {
      releaseKept(returned);
      return failed(requests, error as Error, inputDone - start);
    }
    // Kept outputs no mapped output took (a position the config does not name) are let go now.
    const taken = new Set(this.#io.outputs.values());
    releaseKept(returned.filter((_, i) => !taken.has(i)));
    const hostToDevice = result.hostToDeviceBytes ?? 0;
    const deviceToHost = result.deviceToHostBytes ?? 0;
    hostTransfers.record(model, { hostToDevice, deviceToHost, onDevice });
    this.#log.verbose(
      1,
      `${this.name}: ${requests.length} request(s): ${hostToDevice} bytes host→device, ${deviceToHost} bytes device→host, ${onDevice} bytes on the device`,
    );
    const responses = requests.map((request, i) => {
      let outputs = perRequest[i] ?? [];
      if (request.outputs.length > 0) {
        const byName = new Map(outputs.map((o) => [o.name, o]));
        outputs = request.outputs.flatMap((o) => byName.get(o.name) ?? []);
      } else {
        outputs = outputs.filter((o) => this.#outputs.has(o.name));
      }
      const unused = (perRequest[i] ?? []).filter((o) => o.device && !outputs.includes(o));
      for (const o of unused) o.device?.release();
      const problem = checkOutputs(this.#rules, request, outputs);
      if (problem) for (const o of outputs) o.device?.release();
      return problem ?? outputs;
    });
    return {
      responses,
      computeInputNs: inputDone - start,
      // With a batch ahead of it on the thread, the wall time counts that batch's run too.
      computeInferNs: this.depth > 1 ? BigInt(Math.round(result.inferNs)) : inferDone - inputDone,
      computeOutputNs: now() - inferDone,
    };
  }

  /**
   * The returned positions to keep on this instance's GPU: outputs every request of the batch
   * wants on this device (`deviceOutputs`). None on the CPU.
   */
  #resident(requests: readonly InferenceRequest[]): number[] {
    if (this.#device === undefined) return [];
    const device = this.#device;
    const positions: number[] = [];
    for (const [name, index] of this.#io.outputs) {
      if (requests.every((r) => r.deviceOutputs?.get(name) === device)) positions.push(index);
    }
    return positions;
  }

  /** Release the module and end its thread (after the batch it runs, if any). */
  close(graceMs?: number): Promise<void> {
    return this.#host.close(graceMs);
  }
}

/** A returned tensor as an output, with the config's shape where the output is reshaped. */
function outputTensor(
  name: string,
  wire: TorchWireOutput,
  spec: ModelOutput | undefined,
  batching: boolean,
  model: string,
): Tensor {
  let shape = wire.shape;
  if (spec?.reshape) {
    const dims = spec.dims.map(Number);
    const batch = batching ? [wire.shape[0] ?? 1] : [];
    const total = wire.shape.slice(batch.length).reduce((a, b) => a * b, 1);
    const known = dims.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
    shape = [...batch, ...dims.map((d) => (d === -1 ? total / known : d))];
  }
  const base = { name, datatype: wire.datatype as Tensor["datatype"], shape, parameters: {} };
  if (wire.data === undefined)
    return { ...base, data: NO_BYTES, movable: false, device: keptTensor(wire.tensor, model) };
  // The bytes belong to libtorch's tensor until collected: copied, not moved, to a worker.
  return { ...base, data: wire.data, movable: false };
}

/**
 * A tensor the addon kept on a GPU as the core's device tensor. Its one host copy (when a host
 * consumer needs it) is counted for `model`, which made it.
 */
function keptTensor(handle: TorchKeptTensor, model: string): DeviceTensor {
  let host: Promise<Uint8Array> | undefined;
  return {
    kind: "pytorch",
    deviceId: handle.deviceId,
    byteSize: handle.byteSize,
    handle,
    toHost() {
      host ??= handle.toHost().then((data) => {
        hostTransfers.record(model, { deviceToHost: data.byteLength });
        return data;
      });
      return host;
    },
    copyTo: (pointer, byteSize) => handle.copyTo(pointer, byteSize),
    rows: (start, count) => keptTensor(handle.narrow(start, count), model),
    release: () => handle.dispose(),
  };
}

/** A batch's output per request: host bytes split as views, a kept tensor as views of its rows on the device. */
function scatterKept(tensor: Tensor, batchSizes: readonly number[]): Tensor[] {
  const device = tensor.device;
  if (!device?.rows || batchSizes.length === 1) return scatterOutput(tensor, batchSizes);
  const parts: Tensor[] = [];
  let at = 0;
  for (const size of batchSizes) {
    parts.push({ ...tensor, shape: [size, ...tensor.shape.slice(1)], device: device.rows(at, size) });
    at += size;
  }
  // The views hold the storage; the batch's own handle is not needed any more.
  device.release();
  return parts;
}

/** Let go of the kept tensors among returned outputs. */
function releaseKept(outputs: readonly TorchWireOutput[]): void {
  for (const output of outputs) if (output.data === undefined) output.tensor.dispose();
}

/**
 * One argument from a batch's tensors, some on a GPU: client memory (`pointer`), kept tensors
 * (`tensor`) and host bytes, as one tensor or the parts the addon concatenates on the device.
 */
function deviceArgument(
  name: string,
  parts: readonly (Tensor | undefined)[],
  batching: boolean,
  shaped: (shape: number[]) => number[],
): TorchWireInput {
  if (parts.length > 1 && (!batching || parts.some((p) => !p))) {
    throw new InferenceError("BATCH_INPUT_UNBATCHABLE", { input: name });
  }
  const wires = (parts as Tensor[]).map((tensor): TorchWireInput => {
    if (!TORCH_PROTOCOL_TYPES.has(tensor.datatype)) {
      throw new InferenceError("TORCH_UNSUPPORTED_DATATYPE", { datatype: tensor.datatype, input: name });
    }
    const shape = shaped(tensor.shape);
    const device = tensor.device;
    if (device?.kind === "region" && device.pointer !== undefined) {
      return {
        datatype: tensor.datatype,
        shape,
        pointer: device.pointer,
        deviceId: device.deviceId,
        byteLength: device.byteSize,
      };
    }
    if (device?.kind === "pytorch") {
      return { datatype: tensor.datatype, shape, tensor: device.handle as TorchKeptTensor };
    }
    return { datatype: tensor.datatype, shape, data: tensor.data };
  });
  const first = wires[0] as TorchWireInput;
  if (wires.length === 1) return first;
  const rows = (parts as Tensor[]).reduce((n, t) => n + (t.shape[0] ?? 0), 0);
  return { datatype: first.datatype, shape: shaped([rows, ...first.shape.slice(1)]), parts: wires };
}

function failed(requests: readonly InferenceRequest[], error: Error, inputNs: bigint): ExecuteResult {
  return { responses: requests.map(() => error), computeInputNs: inputNs, computeInferNs: 0n, computeOutputNs: 0n };
}
