// A scripted model's BLS calls marked `direct` (BlsRequest.direct), on its worker thread: the
// target's batch runs through the runner its backend names (`DirectTarget`, e.g. the PyTorch
// backend's modules on their native threads), without the main thread and without the target's
// scheduler. The route comes from the main thread with the answer to an earlier call (see
// `BlsCalls`) and is renewed in the background while it is used. Calls made in one turn of the
// worker's event loop run as one batch (up to `max_batch_size`, equal non-batch dimensions). A
// call that prefers GPU memory gets the outputs its target keeps on that GPU as tensors held by
// this worker, which its next direct calls take in place; a batch whose inputs and outputs all
// stay on the GPU is answered once its work is queued (the backend's deferred completion). Each
// call is checked against the target's config as the core checks it and reported back for the
// target's statistics. Loaded by the worker at its first route only: it brings in the config and
// protocol packages.
import { now } from "../../base/clock.js";
import { backendError, InferenceError, requestId, toInferenceError } from "../../base/errors.js";
import { batchCompatible, type InferenceRequest } from "../../base/inference-request.js";
import { type DeviceTensor, NO_BYTES, type Tensor } from "../../base/tensor.js";
import { validateRequest } from "../../base/validate-request.js";
import type { BlsRequest, BlsResponse, DeviceRef, InputTensor } from "../../model/api.js";
import {
  type DirectRecord,
  type DirectRoute,
  DirectRouteGone,
  type DirectRun,
  type DirectRunner,
  type DirectRunnerHooks,
  type DirectRunnerModule,
} from "../backend.js";
import { tensorFromWire } from "./js-messages.js";
import { isDirectRef, toWireTensor, wrapTensor } from "./js-tensors.js";

/** A route is asked for anew (in the background) once it is this old: a newer version, more instances. */
export const ROUTE_RENEW_MS = 1000;

interface Route {
  route: DirectRoute;
  /** The backend's runner, loaded at the route's first call; undefined where it failed to load. */
  runner: Promise<DirectRunner | undefined>;
  learned: number;
  /** Inputs that may differ in shape within a batch (`allow_ragged_batch`). */
  ragged: ReadonlySet<string>;
  /** Calls made this turn, run as batches at its end. */
  waiting: Waiting[];
}

/** A checked call waiting for the end of the turn. */
interface Waiting {
  request: InferenceRequest;
  batchSize: number;
  settle(ran: Ran | Error): void;
}

/** What one call got from its batch. */
interface Ran {
  outcome: Tensor[] | Error | undefined;
  /** The batch's execution, on its first call only (statistics count an execution once). */
  execution?: NonNullable<DirectRecord["execution"]>;
  transfers?: DirectRun["transfers"];
  compute: { startNs: bigint; endNs: bigint };
}

/** A tensor a direct call kept on a GPU, held by this worker for the model. */
interface Kept {
  tensor: DeviceTensor;
  datatype: string;
  shape: readonly number[];
  /** The open requests of the batch that made the call: it is let go when they have all ended. */
  parents: Set<number>;
}

/** Options of {@link DirectCalls}. */
export interface DirectCallsOptions {
  /** Report a call for the target's statistics (to the main thread). */
  record(record: DirectRecord): void;
  /** Ask the main thread for the model's route again; its answer comes to {@link DirectCalls.learn} or {@link DirectCalls.forget}. */
  renew(model: string, version: string): void;
  log: DirectRunnerHooks["log"];
}

/** One worker's direct routes and calls. */
export class DirectCalls {
  readonly #options: DirectCallsOptions;
  readonly #routes = new Map<string, Route>();
  /** Routes asked for again and not yet answered, by key. */
  readonly #renewing = new Set<string>();
  /**
   * The backends' runner modules by URL, each imported once: a route is renewed every second, and
   * a module that cannot be loaded must not cost an import (and a warning) on every call after.
   */
  readonly #modules = new Map<string, Promise<DirectRunnerModule | undefined>>();
  readonly #kept = new Map<number, Kept>();
  #nextRef = -1;
  /** A kept tensor nothing in the model refers to any more is let go (its `DeviceRef` collected). */
  readonly #unreferenced = new FinalizationRegistry<number>((ref) => this.#release(ref));

  constructor(options: DirectCallsOptions) {
    this.#options = options;
  }

  /** Remember the route the main thread sent for `request`'s model and version. */
  learn(request: Pick<BlsRequest, "model" | "version">, route: DirectRoute): void {
    const key = routeKey(request);
    this.#renewing.delete(key);
    const hooks: DirectRunnerHooks = { name: route.model, log: this.#options.log };
    const url = route.target.runner;
    let module = this.#modules.get(url);
    if (!module) {
      module = (import(url) as Promise<DirectRunnerModule>).catch((error: Error) => {
        this.#options.log.warn(`direct BLS calls to '${route.model}' are not available here: ${error.message}`);
        return undefined;
      });
      this.#modules.set(url, module);
    }
    const runner = module.then((loaded) => loaded?.createDirectRunner(route.config, route.target.spec, hooks));
    const ragged = new Set(route.config.input.filter((i) => i.allowRaggedBatch).map((i) => i.name));
    this.#routes.set(key, { route, runner, learned: performance.now(), ragged, waiting: [] });
  }

  /** The main thread has no route for the model any more: its calls go the usual way. */
  forget(request: Pick<BlsRequest, "model" | "version">): void {
    const key = routeKey(request);
    this.#renewing.delete(key);
    this.#routes.delete(key);
  }

  /**
   * Run `request` directly when a route is known; undefined when the call must go the usual way
   * (no route yet, none any more, a module that has gone, a device tensor of the main thread).
   * `cancelled` says whether the call counts as cancelled (its own signal, or every request of its
   * batch); `parents` are the open requests of the batch making it, which hold the device tensors
   * it gets.
   */
  async infer(
    request: BlsRequest,
    cancelled: () => boolean,
    parents: readonly number[],
    traceParent?: number,
  ): Promise<BlsResponse | undefined> {
    const key = routeKey(request);
    const found = this.#routes.get(key);
    if (!found || found.route.target.instances === 0) return undefined;
    if (request.inputs.some((t) => t.device && !isDirectRef(t.device.ref))) return undefined;
    if (performance.now() - found.learned > ROUTE_RENEW_MS && !this.#renewing.has(key)) {
      // Used meanwhile: a route whose instances have gone shows itself (DirectRouteGone).
      this.#renewing.add(key);
      this.#options.renew(request.model, request.version ?? "");
    }
    const runner = await found.runner;
    if (runner === undefined) return undefined;
    try {
      return await this.#run(found, runner, request, cancelled, parents, traceParent);
    } catch (error) {
      if (!(error instanceof DirectRouteGone)) throw error;
      if (this.#routes.get(key) === found) this.#routes.delete(key);
      return undefined;
    }
  }

  /**
   * The bytes of a tensor a direct call kept (one device-to-host copy), for a call that goes the
   * usual way: the main thread does not know this worker's tensors.
   */
  async hostBytes(tensor: BlsRequest["inputs"][number] & { device: DeviceRef }): Promise<Uint8Array> {
    try {
      return await this.#found(tensor.device, tensor.name, tensor.datatype, tensor.shape).tensor.toHost();
    } catch (error) {
      throw asBlsError(error);
    }
  }

  /** The request `key` has ended: the tensors only it held are let go. */
  requestEnded(key: number): void {
    for (const [ref, kept] of this.#kept) {
      if (kept.parents.delete(key) && kept.parents.size === 0) this.#release(ref);
    }
  }

  /** Device tensors held now (for tests and the worker's own checks). */
  get heldCount(): number {
    return this.#kept.size;
  }

  #release(ref: number): void {
    const kept = this.#kept.get(ref);
    if (!kept) return;
    this.#kept.delete(ref);
    kept.tensor.release();
  }

  /** The kept tensor `device` names; it may be renamed, not retyped or reshaped. */
  #found(device: DeviceRef, name: string, datatype?: string, shape?: readonly number[]): Kept {
    const kept = this.#kept.get(device.ref);
    if (!kept) throw new InferenceError("BLS_DEVICE_TENSOR_RELEASED", { tensor: name, device: device.deviceId });
    if (
      (datatype !== undefined && datatype !== kept.datatype) ||
      (shape !== undefined && shape.join() !== kept.shape.join())
    ) {
      throw new InferenceError("BLS_DEVICE_TENSOR_MISMATCH", {
        tensor: name,
        device: device.deviceId,
        held: `${kept.datatype} [${kept.shape.join(", ")}]`,
        given: `${datatype} [${(shape ?? []).join(", ")}]`,
      });
    }
    return kept;
  }

  /** An input of a direct call: the model's bytes, viewed (it may keep using them: not movable), or a kept tensor lent. */
  #input(tensor: BlsRequest["inputs"][number]): Tensor {
    const device = tensor.device;
    if (!device) return { ...tensorFromWire(toWireTensor(tensor)), movable: false };
    const kept = this.#found(device, tensor.name, tensor.datatype, tensor.shape);
    // Lent: the batch must not let go of what the model still holds.
    const lent = Object.assign(Object.create(kept.tensor) as DeviceTensor, { release: () => {} });
    return {
      name: tensor.name,
      datatype: tensor.datatype,
      shape: [...tensor.shape],
      parameters: {},
      data: NO_BYTES,
      movable: false,
      device: lent,
    };
  }

  /** An output kept on the device, held for `parents`, as the model's tensor. */
  #hold(tensor: Tensor, device: DeviceTensor, parents: readonly number[]): InputTensor {
    const ref = this.#nextRef--;
    this.#kept.set(ref, { tensor: device, datatype: tensor.datatype, shape: tensor.shape, parents: new Set(parents) });
    const wrapped = wrapTensor({
      name: tensor.name,
      datatype: tensor.datatype,
      shape: [...tensor.shape],
      data: NO_BYTES,
      device: { ref, deviceId: device.deviceId, byteSize: device.byteSize },
    });
    if (wrapped.device) this.#unreferenced.register(wrapped.device, ref);
    return wrapped;
  }

  async #run(
    found: Route,
    runner: DirectRunner,
    blsRequest: BlsRequest,
    cancelled: () => boolean,
    parents: readonly number[],
    traceParent: number | undefined,
  ): Promise<BlsResponse> {
    const route = found.route;
    const start = now();
    let compute: Ran["compute"] | undefined;
    const id = blsRequest.id ?? "";
    const record = (extra: Omit<DirectRecord, "model" | "version" | "totalNs" | "trace">) => {
      const end = now();
      this.#options.record({
        model: route.model,
        version: route.version,
        totalNs: Number(end - start),
        ...extra,
        ...(traceParent !== undefined
          ? { trace: { parent: traceParent, id, startNs: start, endNs: end, ...(compute ? { compute } : {}) } }
          : {}),
      });
    };
    let request: InferenceRequest;
    let batchSize: number;
    try {
      const names = blsRequest.outputs ?? route.config.output.map((o) => o.name);
      const preferred = blsRequest.preferredMemory;
      request = {
        modelName: route.model,
        modelVersion: String(route.version),
        id,
        parameters: {},
        inputs: blsRequest.inputs.map((t) => this.#input(t)),
        outputs: (blsRequest.outputs ?? []).map((name) => ({ name, parameters: {} })),
        // GPU memory preferred: the backend keeps there what it makes there (Triton's rule).
        ...(preferred?.kind === "gpu"
          ? { deviceOutputs: new Map(names.map((n) => [n, preferred.deviceId ?? 0])) }
          : {}),
      };
      batchSize = validateRequest(request, route.config);
    } catch (error) {
      record({ failure: "OTHER" });
      throw asBlsError(error);
    }
    if (cancelled()) {
      record({ failure: "CANCELED" });
      throw asBlsError(new InferenceError("CANCELLED", { id: requestId(id) }));
    }
    const ran = await new Promise<Ran>((resolve, reject) => {
      const settle = (outcome: Ran | Error) => (outcome instanceof Error ? reject(outcome) : resolve(outcome));
      this.#enqueue(found, runner, { request, batchSize, settle });
    });
    compute = ran.compute;
    const { outcome, execution, transfers } = ran;
    const counts = { ...(execution ? { execution } : {}), ...(transfers ? { transfers } : {}) };
    if (cancelled()) {
      if (Array.isArray(outcome)) for (const t of outcome) t.device?.release();
      record({ ...counts, failure: "CANCELED" });
      throw asBlsError(new InferenceError("CANCELLED", { id: requestId(id) }));
    }
    if (outcome === undefined || outcome instanceof Error) {
      const failure = outcome === undefined ? new InferenceError("BACKEND_NO_RESPONSE") : backendError(outcome);
      record({ ...counts, failure: failure.id === "BACKEND_FAILED" ? "BACKEND" : "OTHER" });
      throw asBlsError(failure);
    }
    record(counts);
    const outputs: InputTensor[] = outcome.map((t) =>
      t.device
        ? this.#hold(t, t.device, parents)
        : wrapTensor({ name: t.name, datatype: t.datatype, shape: t.shape, data: t.data }),
    );
    return {
      modelName: route.model,
      modelVersion: String(route.version),
      id,
      parameters: {},
      outputs,
      output: (name) => outputs.find((o) => o.name === name),
    };
  }

  /** Queue a checked call for the end of this turn, when the turn's calls run as batches. */
  #enqueue(found: Route, runner: DirectRunner, waiting: Waiting): void {
    found.waiting.push(waiting);
    if (found.waiting.length > 1) return;
    setImmediate(() => {
      const calls = found.waiting.splice(0);
      for (const batch of batches(calls, found.route.config.maxBatchSize, found.ragged))
        void this.#batch(runner, batch);
    });
  }

  async #batch(runner: DirectRunner, calls: readonly Waiting[]): Promise<void> {
    const startNs = now();
    let run: DirectRun;
    try {
      run = await runner.run(calls.map((c) => c.request));
    } catch (error) {
      for (const call of calls) call.settle(error as Error);
      return;
    }
    const compute = { startNs, endNs: now() };
    const batchSize = calls.reduce((n, c) => n + c.batchSize, 0);
    calls.forEach((call, i) => {
      call.settle({
        outcome: run.outcomes[i],
        compute,
        ...(i === 0
          ? {
              execution: { batchSize, requests: calls.length, ...run.execution },
              ...(run.transfers ? { transfers: run.transfers } : {}),
            }
          : {}),
      });
    });
  }
}

/**
 * The turn's calls as batches, in order: a call joins the first batch it fits (at most
 * `maxBatchSize` elements, dimensions the batch shares, the same memory preference), else starts
 * one. A model without batching runs each call alone.
 */
function batches(calls: readonly Waiting[], maxBatchSize: number, ragged: ReadonlySet<string>): Waiting[][] {
  if (maxBatchSize <= 0) return calls.map((c) => [c]);
  const out: { calls: Waiting[]; size: number }[] = [];
  for (const call of calls) {
    const fits = out.find(
      (b) =>
        b.size + call.batchSize <= maxBatchSize &&
        batchCompatible((b.calls[0] as Waiting).request, call.request, ragged) &&
        sameOutputs((b.calls[0] as Waiting).request, call.request),
    );
    if (fits) {
      fits.calls.push(call);
      fits.size += call.batchSize;
    } else out.push({ calls: [call], size: call.batchSize });
  }
  return out.map((b) => b.calls);
}

/** Whether two calls want their outputs in the same places (a batch's outputs stay on the GPU only when all want them there). */
function sameOutputs(a: InferenceRequest, b: InferenceRequest): boolean {
  const x = a.deviceOutputs;
  const y = b.deviceOutputs;
  if (!x || !y) return x === y;
  return x.size === y.size && [...x].every(([name, device]) => y.get(name) === device);
}

function routeKey(request: Pick<BlsRequest, "model" | "version">): string {
  return `${request.model}\u0000${request.version ?? ""}`;
}

/** A BLS error as the usual path's: the core's message and Triton code. */
function asBlsError(error: unknown): Error {
  const failure = toInferenceError(error);
  return Object.assign(new Error(failure.message), { code: failure.code });
}
