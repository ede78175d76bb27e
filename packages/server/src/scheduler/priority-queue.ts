import { type ModelDynamicBatching, type ModelQueuePolicy, ModelQueuePolicy_TimeoutAction } from "@galley/proto";

/** One queue level's policy (Triton's `ModelQueuePolicy`), in nanoseconds. */
export interface QueuePolicy {
  /** REJECT drops an expired request; DELAY moves it behind the requests that have not expired. */
  timeoutAction: "REJECT" | "DELAY";
  /** 0 means no timeout. */
  defaultTimeoutNs: bigint;
  /** A request's `timeout` parameter may lower the default timeout. */
  allowTimeoutOverride: boolean;
  /** 0 means unlimited. */
  maxQueueSize: number;
}

function policyOf(policy: ModelQueuePolicy | undefined): QueuePolicy {
  return {
    timeoutAction: policy?.timeoutAction === ModelQueuePolicy_TimeoutAction.DELAY ? "DELAY" : "REJECT",
    defaultTimeoutNs: (policy?.defaultTimeoutMicroseconds ?? 0n) * 1000n,
    allowTimeoutOverride: policy?.allowTimeoutOverride ?? false,
    maxQueueSize: policy?.maxQueueSize ?? 0,
  };
}

/** An entry the queue holds: when it arrived and when it expires (undefined: never). */
export interface Queued {
  enqueuedNs: bigint;
  deadlineNs?: bigint;
  /** Set once the deadline passed under a DELAY policy. */
  delayed?: boolean;
}

/**
 * Triton's priority queue for the dynamic batcher: one FIFO per priority level (1 is the highest),
 * each with its queue policy; delayed (timed-out under DELAY) requests go after the others of
 * their level.
 */
export class PriorityQueue<T extends Queued> {
  readonly levels: number;
  readonly defaultLevel: number;
  readonly #policies: QueuePolicy[];
  readonly #queues: T[][];
  readonly #delayed: T[][];
  #size = 0;

  constructor(config: ModelDynamicBatching | undefined) {
    this.levels = Math.max(1, Number(config?.priorityLevels ?? 0n));
    const priority = Number(config?.defaultPriorityLevel ?? 0n);
    this.defaultLevel =
      priority >= 1 && priority <= this.levels ? priority : this.levels === 1 ? 1 : Math.ceil(this.levels / 2);
    this.#policies = Array.from({ length: this.levels }, (_, i) =>
      policyOf(config?.priorityQueuePolicy[String(i + 1)] ?? config?.defaultQueuePolicy),
    );
    this.#queues = Array.from({ length: this.levels }, () => []);
    this.#delayed = Array.from({ length: this.levels }, () => []);
  }

  get size(): number {
    return this.#size;
  }

  /**
   * The level a request's `priority` parameter selects: 0, or anything above the configured
   * levels, means the default level (PROTOCOL.md §9.3).
   */
  levelOf(priority: number | undefined): number {
    if (priority === undefined || !Number.isInteger(priority) || priority < 1 || priority > this.levels)
      return this.defaultLevel;
    return priority;
  }

  policy(level: number): QueuePolicy {
    return this.#policies[level - 1] as QueuePolicy;
  }

  /** The deadline for a request at `level`: Triton uses the request's timeout only to lower a non-zero default. */
  deadline(level: number, enqueuedNs: bigint, requestTimeoutNs: bigint | undefined): bigint | undefined {
    const policy = this.policy(level);
    let timeout = policy.defaultTimeoutNs;
    if (
      policy.allowTimeoutOverride &&
      requestTimeoutNs !== undefined &&
      requestTimeoutNs > 0n &&
      (timeout === 0n || requestTimeoutNs < timeout)
    ) {
      timeout = requestTimeoutNs;
    }
    return timeout > 0n ? enqueuedNs + timeout : undefined;
  }

  /** Whether the level's queue is full (its `max_queue_size`). */
  full(level: number): boolean {
    const max = this.policy(level).maxQueueSize;
    return max > 0 && this.levelSize(level) >= max;
  }

  levelSize(level: number): number {
    return (this.#queues[level - 1]?.length ?? 0) + (this.#delayed[level - 1]?.length ?? 0);
  }

  push(level: number, item: T): void {
    this.#queues[level - 1]?.push(item);
    this.#size++;
  }

  /** Every queued item, highest priority first, FIFO within a level, delayed ones last in their level. */
  *ordered(): Generator<T> {
    for (let i = 0; i < this.levels; i++) {
      yield* this.#queues[i] ?? [];
      yield* this.#delayed[i] ?? [];
    }
  }

  /** Remove specific items (those taken into a batch, cancelled, or rejected). */
  remove(items: ReadonlySet<T>): void {
    if (items.size === 0) return;
    for (const list of [...this.#queues, ...this.#delayed]) {
      for (let i = list.length - 1; i >= 0; i--) {
        if (items.has(list[i] as T)) {
          list.splice(i, 1);
          this.#size--;
        }
      }
    }
  }

  /**
   * Apply deadlines at `nowNs`: returns the items to reject (REJECT policy); items under a DELAY
   * policy move behind the others of their level.
   */
  expire(nowNs: bigint): T[] {
    const rejected: T[] = [];
    for (let i = 0; i < this.levels; i++) {
      const queue = this.#queues[i] as T[];
      const action = this.#policies[i]?.timeoutAction;
      for (let j = 0; j < queue.length; ) {
        const item = queue[j] as T;
        if (item.deadlineNs !== undefined && item.deadlineNs <= nowNs) {
          queue.splice(j, 1);
          if (action === "DELAY") {
            item.delayed = true;
            (this.#delayed[i] as T[]).push(item);
          } else {
            rejected.push(item);
            this.#size--;
          }
        } else j++;
      }
    }
    return rejected;
  }

  /** The earliest deadline still to come, for the batcher's timer. */
  nextDeadline(): bigint | undefined {
    let next: bigint | undefined;
    for (const queue of this.#queues) {
      for (const item of queue) {
        if (item.deadlineNs !== undefined && (next === undefined || item.deadlineNs < next)) next = item.deadlineNs;
      }
    }
    return next;
  }
}
