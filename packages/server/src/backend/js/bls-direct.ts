// A scripted model's BLS calls marked `direct` (BlsRequest.direct), on its worker thread: the
// target's batch runs through the runner its backend names (`DirectTarget`, e.g. the PyTorch
// backend's modules on their native threads), without the main thread and without the target's
// scheduler. The route comes from the main thread with the answer to an earlier call (see
// `BlsCalls`); the call is checked against the target's config as the core checks it, run by the
// backend's runner, and reported back for the target's statistics. Loaded by the worker at its
// first route only: it brings in the config and protocol packages.
import { now } from "../../base/clock.js";
import { backendError, InferenceError, requestId, toInferenceError } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Tensor } from "../../base/tensor.js";
import { validateRequest } from "../../base/validate-request.js";
import type { BlsRequest, BlsResponse, InputTensor } from "../../model/api.js";
import {
  type DirectRecord,
  type DirectRoute,
  DirectRouteGone,
  type DirectRunner,
  type DirectRunnerHooks,
  type DirectRunnerModule,
} from "../backend.js";
import { tensorFromWire } from "./js-messages.js";
import { toWireTensor, wrapTensor } from "./js-tensors.js";

/** A route is used this long, then a call goes the usual way again to renew it (a newer version, more instances). */
export const ROUTE_RENEW_MS = 1000;

interface Route {
  route: DirectRoute;
  /** The backend's runner, loaded at the route's first call; undefined where it failed to load. */
  runner: Promise<DirectRunner | undefined>;
  learned: number;
}

/** Options of {@link DirectCalls}. */
export interface DirectCallsOptions {
  /** Report a call for the target's statistics (to the main thread). */
  record(record: DirectRecord): void;
  log: DirectRunnerHooks["log"];
}

/** One worker's direct routes and calls. */
export class DirectCalls {
  readonly #options: DirectCallsOptions;
  readonly #routes = new Map<string, Route>();
  /**
   * The backends' runner modules by URL, each imported once: a route is renewed every second, and
   * a module that cannot be loaded must not cost an import (and a warning) on every call after.
   */
  readonly #modules = new Map<string, Promise<DirectRunnerModule | undefined>>();

  constructor(options: DirectCallsOptions) {
    this.#options = options;
  }

  /** Remember the route the main thread sent for `request`'s model and version. */
  learn(request: BlsRequest, route: DirectRoute): void {
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
    this.#routes.set(routeKey(request), { route, runner, learned: performance.now() });
  }

  /**
   * Run `request` directly when a fresh route is known; undefined when the call must go the usual
   * way (no route yet, a stale one, or one whose module has gone). `cancelled` says whether the
   * call counts as cancelled (its own signal, or every request of its batch).
   */
  async infer(request: BlsRequest, cancelled: () => boolean, traceParent?: number): Promise<BlsResponse | undefined> {
    const key = routeKey(request);
    const found = this.#routes.get(key);
    if (!found) return undefined;
    if (performance.now() - found.learned > ROUTE_RENEW_MS || found.route.target.instances === 0) {
      this.#routes.delete(key);
      return undefined;
    }
    const runner = await found.runner;
    if (runner === undefined) return undefined;
    try {
      return await this.#run(found.route, runner, request, cancelled, traceParent);
    } catch (error) {
      if (!(error instanceof DirectRouteGone)) throw error;
      if (this.#routes.get(key) === found) this.#routes.delete(key);
      return undefined;
    }
  }

  async #run(
    route: DirectRoute,
    runner: DirectRunner,
    blsRequest: BlsRequest,
    cancelled: () => boolean,
    traceParent: number | undefined,
  ): Promise<BlsResponse> {
    const start = now();
    let compute: { startNs: bigint; endNs: bigint } | undefined;
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
    const computeStart = now();
    const { outcome, execution: phases, transfers } = await runner.run(request);
    compute = { startNs: computeStart, endNs: now() };
    // An execution whatever its outcome, as the schedulers count one for every batch they send.
    const execution = { batchSize, ...phases };
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
