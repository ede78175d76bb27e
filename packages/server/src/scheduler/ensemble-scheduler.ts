import type { ModelConfig, ModelEnsembling_Step } from "@galley/proto";
import { InferenceError, toInferenceError } from "../core/errors.js";
import type { InferenceRequest, InferenceResponse } from "../core/inference-request.js";
import type { Tensor } from "../core/tensor.js";
import { now, type ScheduledResult, type Scheduler } from "./scheduler.js";

/** Runs one request on a composing model, through the server's own path (validation, scheduling, statistics). */
export type ComposingInfer = (request: InferenceRequest) => Promise<InferenceResponse>;

/** A counting semaphore: `max_inflight_requests` per step, 0 for no bound. */
class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];
  constructor(readonly limit: number) {
    this.#free = limit;
  }
  async acquire(): Promise<void> {
    if (this.limit === 0) return;
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }
  release(): void {
    if (this.limit === 0) return;
    const next = this.#waiting.shift();
    if (next) next();
    else this.#free++;
  }
}

/**
 * Triton's ensemble scheduler (PROTOCOL.md §3.8, §4.4): the steps of `ensemble_scheduling` form
 * a graph over named tensors; a step starts as soon as all its inputs exist, so independent
 * branches run concurrently. Tensors pass between steps as the same views (a tensor read by more
 * than one step, or returned to the client, is marked not movable so no step can take its buffer
 * away). A failing step fails the request and names the step. Each step honours its model
 * version, and `max_inflight_requests` bounds how many requests each step runs at once, so a fast
 * producer cannot grow memory without limit.
 */
export class EnsembleScheduler implements Scheduler {
  readonly #steps: readonly ModelEnsembling_Step[];
  readonly #slots: Slots[];
  readonly #consumers = new Map<string, number>();
  readonly #outputs: Set<string>;
  #inFlight = 0;
  #draining = false;
  #drained?: () => void;

  constructor(
    readonly config: ModelConfig,
    readonly infer: ComposingInfer,
  ) {
    const ensembling =
      config.schedulingChoice.case === "ensembleScheduling" ? config.schedulingChoice.value : undefined;
    this.#steps = ensembling?.step ?? [];
    const bound = ensembling?.maxInflightRequests ?? 0;
    this.#slots = this.#steps.map(() => new Slots(bound));
    this.#outputs = new Set(config.output.map((o) => o.name));
    for (const step of this.#steps) {
      for (const tensor of Object.values(step.inputMap))
        this.#consumers.set(tensor, (this.#consumers.get(tensor) ?? 0) + 1);
    }
  }

  async enqueue(request: InferenceRequest): Promise<ScheduledResult> {
    this.#inFlight++;
    const start = now();
    try {
      const outputs = await this.#run(request);
      return { outputs, queueNs: now() - start };
    } finally {
      this.#inFlight--;
      if (this.#draining && this.#inFlight === 0) this.#drained?.();
    }
  }

  drain(): Promise<void> {
    this.#draining = true;
    return new Promise((resolve) => {
      this.#drained = resolve;
      if (this.#inFlight === 0) resolve();
    });
  }

  async #run(request: InferenceRequest): Promise<Tensor[]> {
    const tensors = new Map<string, Tensor>();
    for (const input of request.inputs) tensors.set(input.name, this.#share(input));
    const pending = new Set(this.#steps.keys());
    const running = new Map<number, Promise<void>>();
    let failure: unknown;

    const launch = (index: number) => {
      const step = this.#steps[index] as ModelEnsembling_Step;
      pending.delete(index);
      const inputs = Object.entries(step.inputMap).map(([modelInput, tensor]) => ({
        ...(tensors.get(tensor) as Tensor),
        name: modelInput,
      }));
      const task = (async () => {
        await this.#slots[index]?.acquire();
        try {
          const response = await this.infer({
            modelName: step.modelName,
            modelVersion: step.modelVersion === -1n ? "" : String(step.modelVersion),
            id: request.id,
            parameters: request.parameters,
            inputs,
            outputs: Object.keys(step.outputMap).map((name) => ({ name, parameters: {} })),
            ...(request.signal ? { signal: request.signal } : {}),
          });
          for (const output of response.outputs) {
            const tensor = step.outputMap[output.name];
            if (tensor !== undefined) tensors.set(tensor, this.#share({ ...output, name: tensor }));
          }
        } catch (error) {
          const cause = toInferenceError(error);
          failure ??= new InferenceError(
            "ENSEMBLE_STEP_FAILED",
            { ensemble: this.config.name, step: index, model: step.modelName, message: cause.message },
            { cause, code: cause.code },
          );
        } finally {
          this.#slots[index]?.release();
          running.delete(index);
        }
      })();
      running.set(index, task);
    };

    const startReady = () => {
      for (const index of [...pending]) {
        const step = this.#steps[index] as ModelEnsembling_Step;
        if (Object.values(step.inputMap).every((t) => tensors.has(t))) launch(index);
      }
    };
    startReady();
    while (running.size > 0) {
      await Promise.race(running.values());
      if (failure) break;
      startReady();
    }
    if (failure) {
      await Promise.allSettled(running.values());
      throw failure;
    }
    const wanted =
      request.outputs.length > 0 ? request.outputs.map((o) => o.name) : this.config.output.map((o) => o.name);
    return wanted.flatMap((name) => {
      const tensor = tensors.get(name);
      return tensor ? [{ ...tensor, name }] : [];
    });
  }

  /** A tensor read by more than one step, or returned to the client, keeps its buffer here. */
  #share(tensor: Tensor): Tensor {
    const shared = (this.#consumers.get(tensor.name) ?? 0) > 1 || this.#outputs.has(tensor.name);
    return shared && tensor.movable ? { ...tensor, movable: false } : tensor;
  }
}
