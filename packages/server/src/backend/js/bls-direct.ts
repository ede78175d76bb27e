// A scripted model's BLS calls marked `direct` (BlsRequest.direct), on its worker thread: the
// target's batch runs on the target's native thread (the PyTorch backend's module, through
// @galley/backends-native's torchDirect), without the main thread and without the target's
// scheduler. The route comes from the main thread with the answer to an earlier call (see
// `BlsCalls`); the call is checked against the target's config as the core checks it, run with the
// backend's own batch code, and reported back for the target's statistics. Loaded by the worker
// at its first route only: it brings in the config and protocol packages.
import { now } from "../../clock/clock.js";
import type { DirectRecord, DirectRoute } from "../../core/direct-route.js";
import { backendError, InferenceError, requestId, toInferenceError } from "../../core/errors.js";
import type { InferenceRequest } from "../../core/inference-request.js";
import type { Tensor } from "../../core/tensor.js";
import { validateRequest } from "../../core/validate-request.js";
import type { BlsRequest, BlsResponse, InputTensor } from "../../model/api.js";
import { cudaGraphPlan } from "../pytorch/cuda-graphs.js";
import { TorchBatches, type TorchBatchHooks } from "../pytorch/pytorch-batch.js";
import type { TorchExecution, TorchWireInput } from "../pytorch/pytorch-messages.js";
import { tensorFromWire } from "./js-messages.js";
import { toWireTensor, wrapTensor } from "./js-tensors.js";

/** A route is used this long, then a call goes the usual way again to renew it (a newer version, more instances). */
export const ROUTE_RENEW_MS = 1000;

/** What this thread needs of `@galley/backends-native/torch`'s `torchDirect()`. */
export interface TorchDirectCaller {
  execute(id: number, inputs: readonly TorchWireInput[], options?: { graph?: boolean }): Promise<TorchExecution>;
}

interface Route {
  route: DirectRoute;
  batches: TorchBatches;
  hooks: TorchBatchHooks;
  learned: number;
  /** The next instance, round robin. */
  next: number;
}

/** The instance's module is gone (closed, restarted): the route is dropped, the call goes the usual way. */
class RouteGone extends Error {}

/** Options of {@link DirectCalls}. */
export interface DirectCallsOptions {
  torch: TorchDirectCaller;
  /** Report a call for the target's statistics (to the main thread). */
  record(record: DirectRecord): void;
  log: TorchBatchHooks["log"];
}

/** One worker's direct routes and calls. */
export class DirectCalls {
  readonly #options: DirectCallsOptions;
  readonly #routes = new Map<string, Route>();

  constructor(options: DirectCallsOptions) {
    this.#options = options;
  }

  /** Remember the route the main thread sent for `request`'s model and version. */
  learn(request: BlsRequest, route: DirectRoute): void {
    const device = route.target.device;
    const graphs = device === undefined ? undefined : cudaGraphPlan(route.config);
    const model = route.model;
    this.#routes.set(routeKey(request), {
      route,
      batches: new TorchBatches(route.config, route.target.io, device, graphs),
      hooks: {
        name: `${model} (direct)`,
        log: this.#options.log,
        transfers: () => {},
        queued: device !== undefined,
      },
      learned: performance.now(),
      next: 0,
    });
  }

  /**
   * Run `request` directly when a fresh route is known; undefined when the call must go the usual
   * way (no route yet, a stale one, or one whose module has gone). `cancelled` says whether the
   * call counts as cancelled (its own signal, or every request of its batch).
   */
  async infer(request: BlsRequest, cancelled: () => boolean): Promise<BlsResponse | undefined> {
    const key = routeKey(request);
    const found = this.#routes.get(key);
    if (!found) return undefined;
    if (performance.now() - found.learned > ROUTE_RENEW_MS || found.route.target.instances.length === 0) {
      this.#routes.delete(key);
      return undefined;
    }
    try {
      return await this.#run(found, request, cancelled);
    } catch (error) {
      if (!(error instanceof RouteGone)) throw error;
      if (this.#routes.get(key) === found) this.#routes.delete(key);
      return undefined;
    }
  }

  async #run(found: Route, blsRequest: BlsRequest, cancelled: () => boolean): Promise<BlsResponse> {
    const { route, batches, hooks } = found;
    const start = now();
    const id = blsRequest.id ?? "";
    const request: InferenceRequest = {
      modelName: route.model,
      modelVersion: String(route.version),
      id,
      parameters: {},
      // The model's own bytes, viewed (it may keep using them: not movable).
      inputs: blsRequest.inputs.map((t): Tensor => ({ ...tensorFromWire(toWireTensor(t)), movable: false })),
      outputs: (blsRequest.outputs ?? []).map((name) => ({ name, parameters: {} })),
    };
    const record = (extra: Omit<DirectRecord, "model" | "version" | "totalNs">) =>
      this.#options.record({
        model: route.model,
        version: route.version,
        totalNs: Number(now() - start),
        ...extra,
      });
    let batchSize: number;
    try {
      batchSize = validateRequest(request, route.config);
    } catch (error) {
      record({ failure: "OTHER" });
      throw asBlsError(error);
    }
    if (cancelled()) {
      record({ failure: "CANCELED" });
      throw asBlsError(new InferenceError("CANCELLED", { id: requestId(id) }));
    }
    const instances = route.target.instances;
    const instance = instances[found.next++ % instances.length] as number;
    let transfers: DirectRecord["transfers"];
    const result = await batches.run(
      [request],
      async (batch) => {
        try {
          return await this.#options.torch.execute(instance, batch.inputs, batch.graph ? { graph: true } : undefined);
        } catch (error) {
          if ((error as { code?: string }).code === "TORCH_INSTANCE_CLOSED") throw new RouteGone();
          return { error: (error as Error).message };
        }
      },
      {
        ...hooks,
        transfers: (counts) => {
          transfers = counts;
        },
      },
    );
    const outcome = result.responses[0];
    if (outcome instanceof RouteGone) throw outcome;
    // An execution whatever its outcome, as the schedulers count one for every batch they send.
    const execution = {
      batchSize,
      inputNs: Number(result.computeInputNs),
      inferNs: Number(result.computeInferNs),
      outputNs: Number(result.computeOutputNs),
    };
    if (cancelled()) {
      record({ execution, failure: "CANCELED", ...(transfers ? { transfers } : {}) });
      throw asBlsError(new InferenceError("CANCELLED", { id: requestId(id) }));
    }
    if (outcome === undefined || outcome instanceof Error) {
      const failure = outcome === undefined ? new InferenceError("BACKEND_NO_RESPONSE") : backendError(outcome);
      record({
        execution,
        failure: failure.id === "BACKEND_FAILED" ? "BACKEND" : "OTHER",
        ...(transfers ? { transfers } : {}),
      });
      throw asBlsError(failure);
    }
    record({ execution, ...(transfers ? { transfers } : {}) });
    const outputs: InputTensor[] = outcome.map((t) =>
      wrapTensor({ name: t.name, datatype: t.datatype, shape: t.shape, data: t.data }),
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
}

function routeKey(request: BlsRequest): string {
  return `${request.model}\u0000${request.version ?? ""}`;
}

/** A BLS error as the usual path's: the core's message and Triton code. */
function asBlsError(error: unknown): Error {
  const failure = toInferenceError(error);
  return Object.assign(new Error(failure.message), { code: failure.code });
}
