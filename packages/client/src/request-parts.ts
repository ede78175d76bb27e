// The protocol-neutral parts of building a request and reading a response, shared by the gRPC and
// REST clients.
import { Code, ConnectError } from "@connectrpc/connect";
import type {
  InferInput,
  InferOptions,
  InferResult,
  ParameterValue,
  RequestedOutput,
  SharedMemoryPlacement,
} from "./client-types.js";
import type { OutputTensor } from "./tensor.js";

/** The request-level parameters an {@link InferOptions} stands for (priority, timeout, sequence, extras). */
export function requestParameters(request: InferOptions): Record<string, ParameterValue> {
  const out: Record<string, ParameterValue> = { ...(request.parameters ?? {}) };
  if (request.priority !== undefined) out.priority = request.priority;
  if (request.timeoutUs !== undefined) out.timeout = request.timeoutUs;
  const sequence = request.sequence;
  if (sequence) {
    out.sequence_id = typeof sequence.id === "number" ? BigInt(sequence.id) : sequence.id;
    out.sequence_start = sequence.start ?? false;
    out.sequence_end = sequence.end ?? false;
  }
  return out;
}

/** Requested outputs in one form. */
export function requestedOutputs(request: InferOptions): RequestedOutput[] {
  return (request.outputs ?? []).map((o) => (typeof o === "string" ? { name: o } : o));
}

/** The shared-memory parameters of a tensor placed in a region. */
export function sharedMemoryParameters(input: InferInput | RequestedOutput): Record<string, ParameterValue> {
  const placement = "sharedMemory" in input ? input.sharedMemory : undefined;
  if (!placement) return {};
  return {
    shared_memory_region: placement.region,
    shared_memory_byte_size: placement.byteSize,
    ...(placement.offset ? { shared_memory_offset: placement.offset } : {}),
  };
}

/**
 * The outputs a request placed in shared-memory regions, by name. A response says nothing of them
 * (Triton sends such an output's name, datatype and shape only), so the result learns where each
 * went from its request.
 */
export function outputPlacements(request: Pick<InferOptions, "outputs">): Map<string, SharedMemoryPlacement> {
  const placements = new Map<string, SharedMemoryPlacement>();
  for (const o of request.outputs ?? [])
    if (typeof o !== "string" && o.sharedMemory) placements.set(o.name, o.sharedMemory);
  return placements;
}

/**
 * Where an output went: the region its request placed it in, or failing that the
 * `shared_memory_region`, `_offset` and `_byte_size` parameters a server may send with it;
 * undefined for an output carried in the response.
 */
export function outputPlacement(
  name: string,
  placements: ReadonlyMap<string, SharedMemoryPlacement> | undefined,
  parameters: Record<string, ParameterValue> | undefined,
): SharedMemoryPlacement | undefined {
  const requested = placements?.get(name);
  if (requested) return requested;
  const region = parameters?.shared_memory_region;
  if (typeof region !== "string" || region === "") return undefined;
  const offset = Number(parameters?.shared_memory_offset ?? 0);
  return {
    region,
    byteSize: Number(parameters?.shared_memory_byte_size ?? 0),
    ...(offset ? { offset } : {}),
  };
}

/** A result over its outputs. */
export function inferResult(
  head: { modelName: string; modelVersion: string; id: string; parameters: Record<string, ParameterValue> },
  outputs: OutputTensor[],
): InferResult {
  const byName: Record<string, OutputTensor> = {};
  for (const o of outputs) byName[o.name] = o;
  return {
    ...head,
    outputs: byName,
    output(name) {
      const found = byName[name];
      if (!found)
        throw new Error(`the response has no output '${name}' (it has ${Object.keys(byName).join(", ") || "none"})`);
      return found;
    },
  };
}

/** The longest deadline a timer can hold (2^31 - 1 ms, about 24.8 days; `setTimeout`'s limit). */
export const MAX_TIMEOUT_MS = 0x7fffffff;

/**
 * A call's `timeoutMs` checked: a finite number of milliseconds from 0 to {@link MAX_TIMEOUT_MS}
 * (fractions allowed; a deadline of 0 has passed already), or undefined for none.
 *
 * @throws ConnectError INVALID_ARGUMENT for anything else (NaN, negative, infinite, too large).
 */
export function checkTimeoutMs(timeoutMs: number | undefined, what = "timeoutMs"): number | undefined {
  if (timeoutMs === undefined) return undefined;
  if (typeof timeoutMs !== "number" || !(timeoutMs >= 0 && timeoutMs <= MAX_TIMEOUT_MS)) {
    throw new ConnectError(
      `${what} must be a number of milliseconds from 0 to ${MAX_TIMEOUT_MS}, got ${String(timeoutMs)}`,
      Code.InvalidArgument,
    );
  }
  return timeoutMs;
}

/** A call's signals: the caller's, its deadline's (when `timeoutMs` is given), and both as one. */
export interface CallSignals {
  /** What to hand to the transport: the caller's signal, the deadline's, or either. */
  signal: AbortSignal | undefined;
  /** The deadline's own signal, aborted with a `TimeoutError` when it passes. */
  deadline: AbortSignal | undefined;
}

/**
 * The signals of a call: the caller's, with a deadline when `timeoutMs` is given (checked with
 * {@link checkTimeoutMs}; fractions of a millisecond round up).
 */
export function callSignals(options: { signal?: AbortSignal; timeoutMs?: number }): CallSignals {
  const timeoutMs = checkTimeoutMs(options.timeoutMs);
  const deadline = timeoutMs !== undefined ? AbortSignal.timeout(Math.ceil(timeoutMs)) : undefined;
  const present = [options.signal, deadline].filter((s): s is AbortSignal => s !== undefined);
  return { signal: present.length <= 1 ? present[0] : AbortSignal.any(present), deadline };
}

/** An AbortSignal for a call: the caller's, with a deadline when `timeoutMs` is given. */
export function callSignal(options: { signal?: AbortSignal; timeoutMs?: number }): AbortSignal | undefined {
  return callSignals(options).signal;
}
