// One batch on a libtorch instance: the requests' tensors gathered into forward's arguments
// (Triton's naming conventions, see `mapTorchIO`), the returned tensors split per request and
// checked. The same for the instance's own batches (main thread) and a scripted model's direct
// BLS calls (its worker, `bls-direct.ts`): only the way to the instance's thread differs.
import type { ModelConfig, ModelOutput } from "@galley/proto";
import { now } from "../../base/clock.js";
import { InferenceError } from "../../base/errors.js";
import { type HostTransferCounts, hostTransfers } from "../../base/host-transfers.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import { type DeviceTensor, NO_BYTES, type Tensor } from "../../base/tensor.js";
import type { ExecuteResult } from "../backend.js";
import { checkOutputs, configOutputShape, type OutputRules, outputRules, scatterOutput } from "../batch-io.js";
import { batchShapes, type CudaGraphPlan, describeShapes } from "./cuda-graphs.js";
import { outputIndexMessage, TORCH_PROTOCOL_TYPES, type TorchIO } from "./pytorch-io.js";
import type {
  TorchExecution,
  TorchKeptTensor,
  TorchProtocol,
  TorchWireInput,
  TorchWireOutput,
} from "./pytorch-messages.js";

/** Where a batch reports. */
export interface TorchBatchHooks {
  /** The instance's name, for log lines. */
  name: string;
  log: Pick<Logger, "info" | "warn" | "verbose">;
  /** The bytes the batch moved across the host, for `model` (the process's `hostTransfers`). */
  transfers(counts: Partial<HostTransferCounts>): void;
  /** A batch may be ahead of this one on the thread: the wall time would count it, the thread's own time is used. */
  queued: boolean;
}

/** A PyTorch model's batches: what its config and forward's signature decide once, at load. */
export class TorchBatches {
  readonly #config: ModelConfig;
  readonly #io: TorchIO;
  readonly #batching: boolean;
  readonly #inputs: Map<string, ModelConfig["input"][number]>;
  readonly #outputs: Map<string, ModelOutput>;
  readonly #rules: OutputRules;
  /** The GPU the instance runs on; undefined on the CPU. */
  readonly #device: number | undefined;
  readonly #graphs: CudaGraphPlan | undefined;

  constructor(config: ModelConfig, io: TorchIO, device: number | undefined, graphs: CudaGraphPlan | undefined) {
    this.#config = config;
    this.#io = io;
    this.#device = device;
    this.#graphs = graphs;
    this.#batching = config.maxBatchSize > 0;
    this.#inputs = new Map(config.input.map((i) => [i.name, i]));
    this.#outputs = new Map(config.output.map((o) => [o.name, o]));
    this.#rules = outputRules(config);
  }

  /**
   * Run `requests` (validated against the config) as one batch through `execute` (the way to the
   * instance's thread): a response or an error per request, and the phases' durations.
   */
  async run(
    requests: readonly InferenceRequest[],
    execute: (batch: TorchProtocol["batch"]) => Promise<TorchProtocol["result"]>,
    hooks: TorchBatchHooks,
  ): Promise<ExecuteResult> {
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
    const defer = resident.length > 0 && deferrable(requests);
    const shapes = this.#graphs ? batchShapes(requests, this.#batching) : undefined;
    const inputDone = now();
    let result: TorchExecution;
    try {
      const answer = await execute({
        inputs: args as TorchWireInput[],
        ...(resident.length > 0 ? { resident } : {}),
        ...(shapes && this.#graphs?.allows(shapes) ? { graph: true } : {}),
        ...(defer ? { defer: true } : {}),
      });
      if ("error" in answer) throw new InferenceError("TORCH_EXECUTE_FAILED", { message: answer.error });
      result = answer;
      if (result.cudaGraph === "captured") {
        hooks.log.info(`${hooks.name}: captured a CUDA graph for ${describeShapes(shapes ?? new Map())}`);
      }
      if (result.cudaGraphError) {
        hooks.log.warn(
          `${hooks.name}: could not capture a CUDA graph for ${describeShapes(shapes ?? new Map())}, runs eagerly: ${result.cudaGraphError}`,
        );
      }
    } catch (error) {
      return failed(requests, error as Error, inputDone - start);
    }
    const returned = result.outputs;
    const inferDone = now();
    settleInputsAfter(requests, returned);
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
    hooks.transfers({ hostToDevice, deviceToHost, onDevice });
    hooks.log.verbose(
      1,
      `${hooks.name}: ${requests.length} request(s): ${hostToDevice} bytes host→device, ${deviceToHost} bytes device→host, ${onDevice} bytes on the device; ` +
        // libtorch's own time (inputs placed to outputs ready, synchronised) against the wall time
        // from handing the batch over to its result here: the rest is the hops between threads.
        `libtorch ${Math.round(result.inferNs / 1e3)} µs of ${Math.round(Number(inferDone - inputDone) / 1e3)} µs`,
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
      computeInferNs: hooks.queued ? BigInt(Math.round(result.inferNs)) : inferDone - inputDone,
      computeOutputNs: now() - inferDone,
      ...(result.peakBytes !== undefined ? { peakWorkingBytes: result.peakBytes } : {}),
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
}

/**
 * Whether the batch may be answered before its GPU work ends (deferred completion, issue 50): every
 * input on a device is a kept tensor (its memory goes back to libtorch only after this batch's
 * stream) or memory whose owner waits for the batch before reusing it (`settleAfter`: a Python
 * stub's tensor). A client's CUDA region may be rewritten as soon as its request is answered: a
 * batch reading one is synchronised.
 */
function deferrable(requests: readonly InferenceRequest[]): boolean {
  return requests.every((r) =>
    r.inputs.every((t) => !t.device || t.device.kind === "pytorch" || t.device.settleAfter !== undefined),
  );
}

/** A deferred batch's inputs of other processes are given back once its GPU work has ended. */
function settleInputsAfter(requests: readonly InferenceRequest[], returned: readonly TorchWireOutput[]): void {
  let ready: TorchKeptTensor | undefined;
  for (const output of returned) if (output.data === undefined && output.tensor.readyEvent) ready ??= output.tensor;
  const whenReady = ready?.whenReady?.bind(ready);
  if (!whenReady) return;
  let done: Promise<void> | undefined;
  for (const request of requests) {
    for (const input of request.inputs) {
      if (!input.device?.settleAfter) continue;
      done ??= whenReady().catch(() => {});
      input.device.settleAfter(done);
    }
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
  const shape = configOutputShape(wire.shape, spec, batching);
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
    // Where it is in this process: another process (a Python stub) maps libtorch's allocation.
    ...(handle.pointer !== null && handle.pointer !== undefined ? { pointer: handle.pointer } : {}),
    ...(handle.readyEvent ? { event: handle.readyEvent } : {}),
    toHost() {
      host ??= handle.toHost().then((data) => {
        hostTransfers.record(model, { deviceToHost: data.byteLength });
        return data;
      });
      return host;
    },
    copyTo: (pointer, byteSize, deviceId) => handle.copyTo(pointer, byteSize, deviceId),
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
        ...(device.event ? { event: device.event } : {}),
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
