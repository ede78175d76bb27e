import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import { now } from "../base/clock.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { captureCompute } from "../base/trace.js";

/** A rule every execution in a pool follows (`--rate-limit execution_count`: the rate limiter). */
export interface ExecutionPolicy {
  /** Called once per instance as the pool is made. @throws Error when the instance could never execute. */
  admit(instance: BackendInstance): void;
  /** Wait until `instance` may execute; resolves with the function that ends its turn. */
  acquire(instance: BackendInstance): Promise<() => void>;
}

/**
 * A model version's instances, shared by its scheduler: which are idle, and how a batch executes
 * on one. A scheduler takes an idle instance (the one idle longest, or the one a sequence is bound
 * to), executes on it as often as it needs, and gives it back. With a policy, each execution
 * first waits for its turn.
 */
export class InstancePool {
  readonly instances: readonly BackendInstance[];
  /** Idle instances, the one idle longest first; an instance taking two batches at once appears twice. */
  readonly #idle: BackendInstance[];
  readonly #policy: ExecutionPolicy | undefined;

  /**
   * `pipelined`: each instance is idle once per batch it accepts at once (`BackendInstance.depth`);
   * otherwise once (sequence batching). @throws Error when the policy refuses an instance.
   */
  constructor(instances: readonly BackendInstance[], policy?: ExecutionPolicy, pipelined = true) {
    for (const instance of instances) policy?.admit(instance);
    this.instances = instances;
    const depth = (instance: BackendInstance) => (pipelined ? Math.max(1, Math.min(4, instance.depth ?? 1)) : 1);
    // Slot by slot (a, b, a, b): a second batch goes to an instance only when every one has one.
    const most = Math.max(0, ...instances.map(depth));
    this.#idle = [];
    for (let slot = 0; slot < most; slot++) this.#idle.push(...instances.filter((i) => depth(i) > slot));
    this.#policy = policy;
  }

  /** True when some instance is idle. */
  get hasIdle(): boolean {
    return this.#idle.length > 0;
  }

  isIdle(instance: BackendInstance): boolean {
    return this.#idle.includes(instance);
  }

  /** The instance {@link take} would take now, left idle. */
  peek(): BackendInstance | undefined {
    return this.#idle[0];
  }

  /** Take the instance idle longest; undefined when every one is busy. */
  take(): BackendInstance | undefined;
  /** Take `instance`; false when it is busy. */
  take(instance: BackendInstance): boolean;
  take(instance?: BackendInstance): BackendInstance | undefined | boolean {
    if (instance === undefined) return this.#idle.shift();
    const at = this.#idle.indexOf(instance);
    if (at === -1) return false;
    this.#idle.splice(at, 1);
    return true;
  }

  /**
   * Execute a batch on an instance taken from this pool, under the policy. A traced request gets
   * its COMPUTE_* timestamps from the batch's start, end and the instance's input and output times.
   */
  execute(instance: BackendInstance, requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    if (this.#policy) return this.#executeInTurn(this.#policy, instance, requests);
    // Without a policy the batch starts now, not a microtask later.
    for (const request of requests) {
      if (!request.trace) continue;
      const start = now();
      return traced(instance.execute(requests), requests, start);
    }
    return instance.execute(requests);
  }

  async #executeInTurn(
    policy: ExecutionPolicy,
    instance: BackendInstance,
    requests: readonly InferenceRequest[],
  ): Promise<ExecuteResult> {
    const done = await policy.acquire(instance);
    try {
      const start = now();
      return await traced(instance.execute(requests), requests, start);
    } finally {
      done();
    }
  }

  /** Give a taken instance back: it is idle again. */
  give(instance: BackendInstance): void {
    this.#idle.push(instance);
  }
}

async function traced(
  execution: Promise<ExecuteResult>,
  requests: readonly InferenceRequest[],
  startNs: bigint,
): Promise<ExecuteResult> {
  const result = await execution;
  const endNs = now();
  for (const request of requests) if (request.trace) captureCompute(request.trace, startNs, endNs, result);
  return result;
}
