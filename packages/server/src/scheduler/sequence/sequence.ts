import type { BackendInstance } from "../../backend/backend.js";
import type { InferenceError } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Tensor } from "../../base/tensor.js";
import type { ScheduledResult } from "../scheduler.js";
import type { CorrelationId } from "./sequence-controls.js";

/** One request of a sequence, waiting for its turn. */
export interface Pending {
  request: InferenceRequest;
  start: boolean;
  end: boolean;
  /** When it joined its sequence's queue (again, after a reschedule). */
  enqueuedNs: bigint;
  /** Nanoseconds it waited in the queue before the executions that rescheduled it. */
  waitedNs: bigint;
  /** With GPU-memory admission: when it began to wait for GPU memory at the head of its sequence. */
  shortSinceNs?: bigint;
  resolve(result: ScheduledResult): void;
  reject(error: InferenceError): void;
  onAbort?: () => void;
}

/** A sequence from its START to its END (or idle expiry, or cancellation). */
export interface Sequence {
  id: CorrelationId;
  /** Its key in the batcher's map: {@link sequenceKey} of a client's id, `iterative:<n>` for one the batcher gave. */
  key: string;
  /** The instance the sequence is bound to; undefined while it waits in the backlog for a slot. */
  instance: Slot | undefined;
  /** Direct strategy: the sequence's position in its instance's batches, fixed from START to END. */
  position: number;
  queue: Pending[];
  busy: boolean;
  lastNs: bigint;
  /** Implicit state: the value of each state input for the next request. */
  state: Map<string, Tensor>;
  /** Cancelled while a request of it was executing: released once that finishes. */
  cancelled?: boolean;
}

/** One instance and the sequences bound to it (whether it is executing, its pool knows). */
export interface Slot {
  instance: BackendInstance;
  /** The sequences bound to the instance, by position (direct); the first free entries (oldest). */
  positions: (Sequence | undefined)[];
}

/** A sequence's map key: integer and string ids never share one, even with equal text. */
export function sequenceKey(id: CorrelationId): string {
  return `${typeof id}:${String(id)}`;
}
