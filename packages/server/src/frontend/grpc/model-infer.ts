// gRPC inference's semantics, written once for both routes: connect-node's service
// (`inference-service.ts`: gRPC-Web, Connect, and plain gRPC through connect-node) and the lean
// calls on the HTTP/2 stream (`lean-calls.ts`). For ModelInfer and ModelStreamInfer: the
// restricted-protocol header, the request read (the common shape in one pass, any other through
// protobuf-es with its errors), the model checked in Triton's order, the core's `infer` or
// `stream`, the answer, and the trace with the frontend's timestamps. A failure is thrown, for
// `grpc-status.ts` to map to Triton's status (connect-node's `grpcError`, the lean calls'
// `callStatus`).
import { create } from "@bufbuild/protobuf";
import {
  type ModelInferRequest,
  ModelInferResponseSchema,
  type ModelStreamInferResponse,
  ModelStreamInferResponseSchema,
  toInferParameter,
} from "@galley/proto";
import { now } from "../../base/clock.js";
import { hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceRequest, InferenceResponse } from "../../base/inference-request.js";
import type { Trace, TraceHeader } from "../../base/trace.js";
import type { InferenceServer, ModelView, OnDemandWait } from "../../core/inference-server.js";
import { decodeModelInfer, leanRequestFromGrpc, requestFromGrpc, responseToGrpc } from "./grpc-codec.js";
import type { GrpcFrontendOptions } from "./grpc-options.js";
import { GrpcTrace } from "./grpc-trace.js";

/**
 * A `ModelInferRequest` as read: already a core request (the common shape, read in one pass by
 * {@link readModelInfer}) or protobuf-es's message (connect-node's, or any other shape), which is
 * converted once its model is checked (Triton's order of errors).
 */
export type ModelInferInput = InferenceRequest | ModelInferRequest;

/**
 * A `ModelInferRequest`'s bytes as read: the common shape in one pass, as a core request with
 * `signal`; any other through protobuf-es.
 *
 * @throws {@link InferenceError} GRPC_BAD_MESSAGE naming the field where the bytes break.
 */
export function readModelInfer(bytes: Uint8Array, signal: AbortSignal): ModelInferInput {
  return leanRequestFromGrpc(bytes, signal) ?? decodeModelInfer(bytes);
}

/**
 * `--grpc-restricted-protocol`: a call of `category` (`inference`, `health`, ...; Triton's
 * grouping) must carry the header `triton-grpc-protocol-<key>: <value>` of the rule naming it.
 *
 * @throws {@link InferenceError} RESTRICTED_GRPC naming the header it lacks.
 */
export function checkRestricted(
  options: GrpcFrontendOptions,
  category: string,
  header: (name: string) => string | null | undefined,
): void {
  const rule = options.restricted?.find((r) => r.protocols.includes(category));
  if (!rule) return;
  const name = `triton-grpc-protocol-${rule.key}`;
  if (header(name) !== rule.value) throw new InferenceError("RESTRICTED_GRPC", { header: name });
}

/**
 * ModelInfer: the trace sampled once the request is read (before the core looks at the model, as
 * Triton), the model checked, the request run, and `respond` given the response. The lean call
 * writes it there, between GRPC_SEND_START and GRPC_SEND_END, after GRPC_WAITREAD_* from
 * `readStartNs`; connect-node's route encodes it for connect-node to write (no frontend marks:
 * reading and writing are connect-node's).
 */
export async function modelInfer<T>(
  server: InferenceServer,
  req: ModelInferInput,
  signal: AbortSignal,
  respond: (response: InferenceResponse) => T,
  readStartNs?: bigint,
  header?: TraceHeader,
): Promise<T> {
  const sampled = server.tracing.sample(req.modelName, header);
  if (!sampled) return respond(await infer(server, req, signal));
  const trace = new GrpcTrace(sampled, readStartNs === undefined ? undefined : [readStartNs, now()]);
  try {
    const response = await infer(server, req, signal, sampled);
    trace.responded();
    if (readStartNs === undefined) return respond(response);
    trace.mark("GRPC_SEND_START");
    const answer = respond(response);
    trace.mark("GRPC_SEND_END");
    return answer;
  } finally {
    trace.end();
  }
}

/** A unary request run: refused while shutting down and for a decoupled model, converted after its model is found. */
function infer(server: InferenceServer, req: ModelInferInput, signal: AbortSignal, trace?: Trace) {
  if (!server.accepting) throw new InferenceError("SHUTTING_DOWN_GRPC");
  const found = server.inferenceModel(req.modelName, req.modelVersion, waitOf(req, signal));
  if (found instanceof Promise) return found.then((model) => run(server, req, model, signal, trace));
  return run(server, req, found, signal, trace);
}

function run(server: InferenceServer, req: ModelInferInput, model: ModelView, signal: AbortSignal, trace?: Trace) {
  if (model.decoupled) throw new InferenceError("DECOUPLED_GRPC");
  const request = coreRequest(req, signal);
  if (trace) request.trace = trace;
  return server.infer(request, model);
}

/** How long a request waits for its model's load on demand: its `timeout` parameter (µs), its cancellation. */
function waitOf(req: ModelInferInput, signal: AbortSignal): OnDemandWait {
  let timeout: unknown;
  if ("$typeName" in req) {
    const choice = req.parameters.timeout?.parameterChoice;
    timeout = choice?.case === "int64Param" || choice?.case === "uint64Param" ? choice.value : undefined;
  } else timeout = req.parameters.timeout;
  return {
    ...(typeof timeout === "number" || typeof timeout === "bigint" ? { timeoutUs: Number(timeout) } : {}),
    signal,
  };
}

function coreRequest(req: ModelInferInput, signal: AbortSignal): InferenceRequest {
  return "$typeName" in req ? requestFromGrpc(req, signal) : req;
}

/** Whether a request asked for a flag-only final response (`triton_enable_empty_final_response`). */
function wantsEmptyFinal(req: ModelInferInput): boolean {
  if (!("$typeName" in req)) return req.parameters.triton_enable_empty_final_response === true;
  const choice = req.parameters.triton_enable_empty_final_response?.parameterChoice;
  return choice?.case === "boolParam" && choice.value;
}

/** A default-mode request's place in a stream's answers: its message once made, or `skip` (it turned out decoupled). */
interface Slot {
  message?: ModelStreamInferResponse;
  skip?: boolean;
}

/**
 * ModelStreamInfer (PROTOCOL.md §9.1): requests on one stream are served concurrently. A
 * default-mode model's response is written in the order the requests arrived; a decoupled
 * model's responses are written as they are produced. Every response carries
 * `triton_final_response`; a flag-only final is sent only to a request that set
 * `triton_enable_empty_final_response`. An error answers its request only, unless the stream was
 * opened with the `triton_grpc_error: true` header: then the first error ends the stream with its
 * status.
 */
export async function* streamInfer(
  server: InferenceServer,
  requests: AsyncIterable<ModelInferInput>,
  context: { signal: AbortSignal; closeOnError: boolean; header?: TraceHeader },
): AsyncGenerator<ModelStreamInferResponse> {
  const { closeOnError } = context;
  /** Default-mode responses wait here for the requests before them; decoupled ones do not. */
  const slots: Slot[] = [];
  const ready: ModelStreamInferResponse[] = [];
  let fatal: unknown;
  let wake: (() => void) | undefined;
  let pending = 0;
  let inputDone = false;
  const notify = () => wake?.();
  const flushSlots = () => {
    for (let first = slots[0]; first && (first.message || first.skip); first = slots[0]) {
      slots.shift();
      if (first.message) ready.push(first.message);
    }
    notify();
  };
  const final = (value: boolean) => ({ triton_final_response: toInferParameter(value) });
  /** Traced requests' messages not yet written, and whether each is the request's last. */
  const traced = new Map<ModelStreamInferResponse, { trace: GrpcTrace; last: boolean }>();
  const openTraces = new Set<GrpcTrace>();
  const finish = (trace: GrpcTrace) => {
    openTraces.delete(trace);
    trace.end();
  };

  const serve = async (req: ModelInferInput, readStart: bigint, readEnd: bigint) => {
    let model: ModelView | undefined;
    let slot: Slot | undefined;
    const sampled = server.tracing.sample(req.modelName, context.header);
    const trace = sampled && new GrpcTrace(sampled, [readStart, readEnd]);
    if (trace) openTraces.add(trace);
    const follow = (message: ModelStreamInferResponse, last: boolean) => {
      if (!trace) return;
      trace.responded();
      traced.set(message, { trace, last });
    };
    /** A default-mode response waits in its request's slot; a decoupled one is ready at once. */
    const deliver = (message: ModelStreamInferResponse) => {
      if (slot) {
        slot.message = message;
        flushSlots();
      } else {
        ready.push(message);
        notify();
      }
    };
    try {
      if (!server.accepting) throw new InferenceError("SHUTTING_DOWN_GRPC");
      const found = server.inferenceModel(req.modelName, req.modelVersion, waitOf(req, context.signal));
      if (found instanceof Promise) {
        // Loading on demand: hold this request's place among the default-mode answers meanwhile.
        slot = {};
        slots.push(slot);
        model = await found;
        if (model.decoupled) {
          slot.skip = true;
          slot = undefined;
          flushSlots();
        }
      } else {
        model = found;
        if (!model.decoupled) {
          slot = {};
          slots.push(slot);
        }
      }
      const wantEmptyFinal = wantsEmptyFinal(req);
      const request = coreRequest(req, context.signal);
      if (trace) request.trace = trace.trace;
      for await (const item of server.stream(request, model)) {
        if (item.empty && !wantEmptyFinal) continue;
        const response = item.empty
          ? create(ModelInferResponseSchema, {
              id: req.id,
              modelName: item.response.modelName,
              modelVersion: item.response.modelVersion,
            })
          : responseToGrpc(item.response);
        Object.assign(response.parameters, final(item.final));
        // As create(ModelStreamInferResponseSchema, { inferResponse: response }) gives it, without its reflection.
        const message: ModelStreamInferResponse = {
          $typeName: "inference.ModelStreamInferResponse",
          errorMessage: "",
          inferResponse: response,
        };
        follow(message, item.final);
        deliver(message);
      }
    } catch (error) {
      if (closeOnError) {
        fatal ??= error;
        notify();
        return;
      }
      const failure = toInferenceError(error);
      const hidden = hiddenCause(failure);
      if (hidden !== undefined) server.log.error(`gRPC ModelStreamInfer: ${hidden}`);
      const message = create(ModelStreamInferResponseSchema, {
        errorMessage: failure.message,
        inferResponse: {
          id: req.id,
          modelName: req.modelName,
          modelVersion: req.modelVersion,
          ...(model?.decoupled ? { parameters: final(true) } : {}),
        },
      });
      follow(message, true);
      deliver(message);
    } finally {
      // Ends here when no message of it is left to write (else when its last one is written).
      if (trace && ![...traced.values()].some((t) => t.trace === trace)) finish(trace);
    }
  };

  const consume = (async () => {
    let readStart = now();
    for await (const req of requests) {
      pending++;
      void serve(req, readStart, now()).finally(() => {
        pending--;
        notify();
      });
      readStart = now();
    }
  })().then(
    () => {
      inputDone = true;
      notify();
    },
    (error: unknown) => {
      inputDone = true;
      fatal ??= error;
      notify();
    },
  );
  try {
    while (true) {
      if (fatal !== undefined) throw fatal;
      const next = ready.shift();
      if (next) {
        const followed = traced.get(next);
        if (!followed) {
          yield next;
          continue;
        }
        followed.trace.mark("GRPC_SEND_START");
        yield next;
        followed.trace.mark("GRPC_SEND_END");
        // Deleted only now: until it is written, the request's own end leaves its trace open.
        traced.delete(next);
        if (followed.last) finish(followed.trace);
        continue;
      }
      if (inputDone && pending === 0) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
    await consume;
  } finally {
    // Requests whose last message was never written (the stream ended, an empty final not sent).
    for (const trace of openTraces) trace.end();
  }
}
