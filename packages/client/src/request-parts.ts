// The protocol-neutral parts of building a request and reading a response, shared by the gRPC and
// REST clients.
import type { InferInput, InferOptions, InferResult, ParameterValue, RequestedOutput } from "./client-types.js";
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

/** An AbortSignal for a call: the caller's, with a deadline when `timeoutMs` is given. */
export function callSignal(options: { signal?: AbortSignal; timeoutMs?: number }): AbortSignal | undefined {
  const signals = [
    options.signal,
    options.timeoutMs !== undefined ? AbortSignal.timeout(options.timeoutMs) : undefined,
  ];
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length <= 1) return present[0];
  return AbortSignal.any(present);
}
