import type { ModelConfig } from "@galley/proto";
import type { HostTransferCounts } from "../base/host-transfers.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Logger } from "../base/log.js";
import type { Parameters, Tensor } from "../base/tensor.js";

/** What a backend gets to load one model version. The config is final (autofilled, validated). */
export interface BackendLoadContext {
  config: ModelConfig;
  version: number;
  /** The model's folder. */
  modelPath: string;
  /** The version's folder, `<modelPath>/<version>`. */
  versionPath: string;
  log: Logger;
  /** Aborted when the load is no longer wanted (an unload arrived): a backend may stop early and reject. */
  signal?: AbortSignal;
}

/** The outcome of one execution: outputs or an error per request, and how long each phase took. */
export interface ExecuteResult {
  /** Parallel to the requests executed. */
  responses: (Tensor[] | Error)[];
  /** The responses' own parameters (Triton's `InferenceResponse(parameters=...)`), parallel; absent when none has any. */
  parameters?: (Parameters | undefined)[];
  /**
   * The requests (indexes) the model released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: not
   * answered (their entry in `responses` is empty), to be executed again. Only a model whose
   * config has `sequence_batching { iterative_sequence: true }` reschedules; its sequence batcher
   * queues them again.
   */
  rescheduled?: readonly number[];
  /** Nanoseconds spent preparing inputs, running the model, and extracting outputs. */
  computeInputNs: bigint;
  computeInferNs: bigint;
  computeOutputNs: bigint;
  /**
   * On a GPU, where the backend measures it: the most working memory the batch took (the PyTorch
   * allocator's peak during it less what was held before), for GPU-memory admission.
   */
  peakWorkingBytes?: number;
}

/**
 * One model instance (`instance_group` count gives several): executes a batch of requests, off
 * the event loop. Requests have been validated against the config; `batchSize` is the sum of
 * their batch dimensions (1 each without batching).
 */
export interface BackendInstance {
  readonly name: string;
  /** The instance group's `rate_limiter` (resources and priority), when it has one. */
  readonly rateLimiter?: import("@galley/proto").ModelRateLimiter;
  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult>;
  /**
   * How many batches the instance accepts at once, run one after another in order on its own
   * thread (1 when absent). With 2, the scheduler hands it the next batch while the last one's
   * results wait for the event loop, so a fast device is not left idle for that turnaround.
   * Sequence batching ignores it (a sequence's state moves one batch at a time).
   */
  readonly depth?: number;
  /** The GPU (CUDA ordinal) it runs on; absent on the CPU or where the backend does not say. */
  readonly device?: number | undefined;
  /**
   * The process it runs in where that is not the server's (a Python model's stub, while it is up),
   * so its memory can be measured; absent: the server's own process.
   */
  readonly pid?: number | undefined;
}

/**
 * Where a model's instances run when they take tensors on a GPU as they are (`Tensor.device`):
 * client memory in a CUDA region there, tensors kept there by the same backend, and those of the
 * kinds it names in `takes`.
 */
export interface DevicePlacement {
  /**
   * Every instance runs on this GPU. Absent: the model takes device tensors on any GPU (a Python
   * model, whose stubs map memory of any GPU and put their own tensors where the model does).
   */
  readonly deviceId?: number;
  /**
   * What the tensors it keeps on the device are (see `DeviceTensor.kind`): the backend's own name
   * (tensors only it runs on, by `handle`), or `region` (plain device memory at `pointer`, which any
   * model on that GPU reads in place).
   */
  readonly kind: string;
  /** Other kinds of kept tensors it takes on its GPU besides its own and `region` (e.g. by one device copy). */
  readonly takes?: readonly string[];
}

/**
 * Whether a model placed at `placement` takes, as it is, a tensor of `kind` kept on GPU `deviceId`
 * (undefined: a model placed on any GPU will keep it, on the GPU it then chooses).
 */
export function takesKept(placement: DevicePlacement, kind: string, deviceId: number | undefined): boolean {
  const sameGpu = placement.deviceId === undefined || deviceId === undefined || placement.deviceId === deviceId;
  return sameGpu && (kind === placement.kind || kind === "region" || (placement.takes?.includes(kind) ?? false));
}

/**
 * A capability a backend may offer: another thread (a scripted model's worker, for BLS calls
 * marked `direct`, see `DirectRoute`) runs this model's batches itself, without the model's
 * scheduler and without the main thread. The backend names its own runner module, which that
 * thread loads; nothing outside the backend knows how the batches run.
 */
export interface DirectTarget {
  /** A module (file URL) exporting {@link DirectRunnerModule.createDirectRunner}, loadable in a worker thread. */
  readonly runner: string;
  /** What the runner needs of this model's instances, in the backend's own terms (structured-cloneable). */
  readonly spec: unknown;
  /** How many instances take direct batches now (0: none, the calls go the usual way). */
  readonly instances: number;
}

/** What a backend's direct runner module exports. */
export interface DirectRunnerModule {
  createDirectRunner(config: ModelConfig, spec: unknown, hooks: DirectRunnerHooks): DirectRunner;
}

/** What a direct runner is given by the thread that hosts it. */
export interface DirectRunnerHooks {
  /** The model, for log lines. */
  name: string;
  log: Pick<Logger, "info" | "warn" | "verbose">;
}

/**
 * One direct run of a batch: each request's outputs (or why it failed), in order; the batch's
 * phases; the host bytes it moved.
 */
export interface DirectRun {
  outcomes: (Tensor[] | Error | undefined)[];
  execution: { inputNs: number; inferNs: number; outputNs: number };
  transfers?: Partial<HostTransferCounts>;
}

/** Runs requests of one model version from another thread. */
export interface DirectRunner {
  /**
   * Run `requests` (each already checked against the config, together fitting one batch: at
   * most `max_batch_size` elements, equal non-batch dimensions) as one batch.
   *
   * @throws {@link DirectRouteGone} when the instances the route named have gone (closed,
   * restarted): the caller drops the route and the calls go the usual way.
   */
  run(requests: readonly InferenceRequest[]): Promise<DirectRun>;
}

/** The instances a direct route named have gone. */
export class DirectRouteGone extends Error {}

/** What a scripted model's worker needs to run a model's batches itself. */
export interface DirectRoute {
  model: string;
  version: number;
  /** The final config: the worker checks requests against it, as the core does. */
  config: ModelConfig;
  target: DirectTarget;
}

/** One direct call as the worker saw it: what the model's statistics count. */
export interface DirectRecord {
  model: string;
  version: number;
  /** From the call's start to its answer (ns). */
  totalNs: number;
  /**
   * The model ran (an execution of `batchSize` elements, with these phases in ns), for this call
   * and `requests - 1` more of the same batch (default 1), whose records carry no execution.
   */
  execution?: { batchSize: number; requests?: number; inputNs: number; inferNs: number; outputNs: number };
  /** Triton's failure reason; absent on success. */
  failure?: "OTHER" | "BACKEND" | "CANCELED";
  transfers?: Partial<HostTransferCounts>;
  /**
   * The call was made for a traced request (the caller's request `parent`, by key): its steady-clock
   * stamps (ns), for the server to write it as that trace's child.
   */
  trace?: { parent: number; id: string; startNs: bigint; endNs: bigint; compute?: { startNs: bigint; endNs: bigint } };
}

/** A loaded model version: its instances, and how to release them. */
export interface BackendModel {
  readonly instances: readonly BackendInstance[];
  /**
   * Where a scripted model's worker may run batches of this model itself (see
   * {@link DirectTarget}); undefined while none can (an instance down). Absent: never.
   */
  directTarget?(): DirectTarget | undefined;
  /**
   * Set when the model takes device tensors (every instance on one GPU, or, for a Python model,
   * any): the core then leaves CUDA-region inputs in place for it and may ask it to keep outputs
   * on the device (`InferenceRequest.deviceOutputs`). Absent: the model gets host bytes only.
   */
  readonly deviceTensors?: DevicePlacement;
  /**
   * The model's own readiness (a scripted model's `isReady()`); ready when absent. A string: not
   * ready, and why (the core logs it at verbose level 1, as Triton's does).
   */
  isReady?(): Promise<boolean | string>;
  /**
   * False while an instance is down (a scripted model's worker restarting after a failure): the
   * model then reports not ready, and so does the server under strict readiness. Healthy when absent.
   */
  healthy?(): boolean;
  /** Why the model is not {@link healthy}, in Triton's words where it has some (logged with a readiness check). */
  unhealthy?(): string | undefined;
  /**
   * Set by backends whose instances run where they can be stopped mid-execute (a Python stub, a
   * worker thread): an unload waits this long for the requests in flight, then calls
   * {@link unload}, which ends what still runs and fails its requests. Absent: an unload waits
   * for every request to finish.
   */
  readonly unloadTimeoutMs?: number;
  /**
   * The processes the model's instances run in besides the server's own (a Python model's stubs),
   * so the server can count their memory as the model's. Absent: none.
   */
  processIds?(): readonly number[];
  /** Release the instances; those still executing (past {@link unloadTimeoutMs}) are ended. */
  unload(): Promise<void>;
}

/**
 * A backend, found by the config's `backend` (`onnxruntime`, `js`, ...). `load` runs off the
 * event loop where the work is heavy (sessions are created in worker threads).
 */
export interface Backend {
  readonly name: string;
  load(context: BackendLoadContext): Promise<BackendModel>;
  /**
   * The backend's auto-complete (Triton's ONNX Runtime backend reads the model file), given the
   * config so far; returns undefined when it has nothing to add.
   */
  autoComplete?(
    config: ModelConfig,
    modelPath: string,
    version: number,
  ): Promise<import("@galley/config").AutoCompleteResult | undefined>;
}
