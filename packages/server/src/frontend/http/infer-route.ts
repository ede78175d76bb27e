import { InferenceError } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Trace } from "../../base/trace.js";
import type { InferenceServer, ModelView } from "../../core/inference-server.js";
import type { Body, HttpAnswer } from "../transport/http-exchange.js";
import { compress, type Encoding, requestEncoding, responseEncoding } from "./compression.js";
import type { Context } from "./context.js";
import { atoi, decodeInfer, rawIsBytes } from "./infer-request.js";
import { encodeInferResponse } from "./infer-response.js";

/**
 * `POST /v2/models/{m}[/versions/{v}]/infer`, in Triton's order: the model (404 when unknown,
 * 501 when decoupled), the request encoding, the body, the JSON header and binary data, then
 * the inference; the reply is compressed as `Accept-Encoding` asks. If the client disconnects,
 * the request is cancelled. Everything up to asking for the body runs before the first `await`,
 * so that the lean path reads the body straight into place (`HttpRequest.body`).
 */
export function handleInfer(ctx: Context, modelName: string, modelVersion: string): Promise<HttpAnswer> {
  const found = ctx.server.inferenceModel(modelName, modelVersion, { signal: ctx.request.signal });
  if (!(found instanceof Promise)) return inferOn(ctx, notDecoupled(found), modelName, modelVersion);
  // Loading on demand: the body is asked for now, so that it arrives while the model loads (placed
  // without knowing whether a raw input is BYTES), and the request goes on once the model is READY.
  // The wait is bounded by the server's limit and the client: the request's `timeout` is in the body.
  let body: Promise<Body>;
  try {
    body = askBody(ctx, undefined);
  } catch (error) {
    // Reported after the model's own errors, as for a READY model (`inferOn` meets it again).
    body = Promise.reject(error);
  }
  body.catch(() => undefined);
  return found.then((model) => inferOn(ctx, notDecoupled(model), modelName, modelVersion, body));
}

/** Ask for the body, placed for `model` (see {@link bodyOffset}). */
function askBody(ctx: Context, model: ModelView | undefined): Promise<Body> {
  // Triton limits the JSON header, JSON and raw input data and the decompressed body, not the
  // binary data; the body as a whole is bounded by --http-max-body-size.
  return ctx.request.body({
    limit: ctx.bodyLimit,
    limitError: "BODY_TOO_LARGE",
    decompressedLimit: ctx.limit,
    encoding: requestEncoding(ctx.request.header("content-encoding")),
    offset: bodyOffset(ctx.request.header("inference-header-content-length"), model),
  });
}

function inferOn(
  ctx: Context,
  model: ModelView,
  modelName: string,
  modelVersion: string,
  asked?: Promise<Body>,
): Promise<HttpAnswer> {
  const { server, request } = ctx;
  // Sampled here, as Triton samples once the model is known (before the body is read).
  const trace = server.tracing.sample(modelName, request);
  trace?.capture("HTTP_RECV_START");
  try {
    requestEncoding(request.header("content-encoding"));
    const replyEncoding = responseEncoding(request.header("accept-encoding"));
    const lengthHeader = request.header("inference-header-content-length");
    const body = asked ?? askBody(ctx, model);
    const steps = { model, modelName, modelVersion, lengthHeader, replyEncoding, maxInputSize: ctx.limit };
    const answer = infer(server, body, steps, request.signal, trace);
    return trace ? answer.catch((error: unknown) => endTrace(trace, error)) : answer;
  } catch (error) {
    if (trace) trace.end();
    throw error;
  }
}

function endTrace(trace: Trace, error: unknown): never {
  trace.end();
  throw error;
}

/** 501 for a decoupled model, which answers over gRPC streams only. */
function notDecoupled(model: ModelView): ModelView {
  if (model.decoupled) throw new InferenceError("DECOUPLED_HTTP");
  return model;
}

/**
 * Where the body goes in its buffer: so that the binary data after a JSON header of known length
 * starts 8-byte aligned (typed arrays over it need no copy), or so that a raw BYTES input has
 * room for its length prefix.
 */
function bodyOffset(lengthHeader: string | undefined, model: ModelView | undefined): number {
  const planned = lengthHeader === undefined ? -1 : atoi(lengthHeader);
  return planned === 0 ? (model && rawIsBytes(model) ? 4 : 0) : planned > 0 ? (8 - (planned % 8)) % 8 : 0;
}

interface InferSteps {
  model: ModelView;
  modelName: string;
  modelVersion: string;
  lengthHeader: string | undefined;
  replyEncoding: Encoding;
  maxInputSize: number;
}

/** Once the body has arrived: decode it, run it and encode the reply, compressed as asked. */
async function infer(
  server: InferenceServer,
  received: Promise<Body>,
  steps: InferSteps,
  signal: AbortSignal,
  trace: Trace | undefined,
): Promise<HttpAnswer> {
  const body = await received;
  trace?.capture("HTTP_RECV_END");
  const { request, plan } = decodeInfer(
    body,
    steps.lengthHeader,
    steps.model,
    steps.modelName,
    steps.modelVersion,
    steps.maxInputSize,
  );
  const call: InferenceRequest = { ...request, signal };
  if (trace) call.trace = trace;
  const encoded = encodeInferResponse(await server.infer(call), plan);
  trace?.capture("INFER_RESPONSE_COMPLETE");
  const answer: HttpAnswer =
    steps.replyEncoding === "identity"
      ? { status: 200, parts: encoded.parts, headers: encoded.headers }
      : {
          status: 200,
          parts: await compress(encoded.parts, steps.replyEncoding),
          headers: { ...encoded.headers, "Content-Encoding": steps.replyEncoding },
        };
  if (trace) answer.trace = trace;
  return answer;
}
