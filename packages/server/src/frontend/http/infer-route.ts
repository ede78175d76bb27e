import { InferenceError } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Trace } from "../../base/trace.js";
import type { InferenceServer, ModelView } from "../../core/inference-server.js";
import { type Body, readBody } from "./body.js";
import { compress, type Encoding, requestEncoding, responseEncoding } from "./compression.js";
import { type Context, header } from "./context.js";
import { atoi, decodeInfer } from "./infer-request.js";
import { type EncodedResponse, encodeInferResponse } from "./infer-response.js";
import { rawIsBytes } from "./raw-request.js";

/**
 * `POST /v2/models/{m}[/versions/{v}]/infer`, in Triton's order: the model (404 when unknown,
 * 501 when decoupled), the request encoding, the body, the JSON header and binary data, then
 * the inference; the reply is compressed as `Accept-Encoding` asks. If the client disconnects,
 * the request is cancelled. (The lean HTTP/1 path, `http1-lean.ts`, takes the same steps.)
 */
export function handleInfer(ctx: Context, modelName: string, modelVersion: string): Promise<void> {
  const model = inferModel(ctx.server, modelName, modelVersion);
  // Sampled here, as Triton samples once the model is known (before the body is read).
  const trace = ctx.server.tracing.sample(modelName);
  if (!trace) return infer(ctx, model, modelName, modelVersion);
  trace.capture("HTTP_RECV_START");
  return infer(ctx, model, modelName, modelVersion, trace).finally(() => trace.end());
}

/** The model an infer request names; 501 for a decoupled one, which answers over gRPC streams only. */
export function inferModel(server: InferenceServer, modelName: string, modelVersion: string): ModelView {
  const model = server.model(modelName, modelVersion);
  if (model.decoupled) throw new InferenceError("DECOUPLED_HTTP");
  return model;
}

/**
 * Where the body goes in its buffer: so that the binary data after a JSON header of known length
 * starts 8-byte aligned (typed arrays over it need no copy), or so that a raw BYTES input has
 * room for its length prefix.
 */
export function bodyOffset(lengthHeader: string | undefined, model: ModelView): number {
  const planned = lengthHeader === undefined ? -1 : atoi(lengthHeader);
  return planned === 0 ? (rawIsBytes(model) ? 4 : 0) : planned > 0 ? (8 - (planned % 8)) % 8 : 0;
}

/**
 * Decode a received body, run it and encode the reply, compressed in `replyEncoding`: the steps
 * of an infer request after its body has arrived, common to both HTTP/1 paths.
 */
export async function answerInfer(
  server: InferenceServer,
  body: Body,
  lengthHeader: string | undefined,
  model: ModelView,
  modelName: string,
  modelVersion: string,
  replyEncoding: Encoding,
  signal: AbortSignal,
  trace: Trace | undefined,
): Promise<EncodedResponse> {
  const { request, plan } = decodeInfer(body, lengthHeader, model, modelName, modelVersion);
  // Resolved again: the model may have been unloaded while the body was read.
  const call: InferenceRequest = { ...request, signal };
  if (trace) call.trace = trace;
  const encoded = encodeInferResponse(await server.infer(call), plan);
  trace?.capture("INFER_RESPONSE_COMPLETE");
  if (replyEncoding === "identity") return encoded;
  const parts = await compress(encoded.parts, replyEncoding);
  return { parts, headers: { ...encoded.headers, "Content-Encoding": replyEncoding } };
}

async function infer(
  ctx: Context,
  model: ModelView,
  modelName: string,
  modelVersion: string,
  trace?: Trace,
): Promise<void> {
  const { req, reply, server } = ctx;
  const encoding = requestEncoding(header(req, "content-encoding"));
  const replyEncoding = responseEncoding(header(req, "accept-encoding"));
  const lengthHeader = header(req, "inference-header-content-length");
  const body = await readBody(req, { limit: ctx.limit, encoding, offset: bodyOffset(lengthHeader, model) });
  trace?.capture("HTTP_RECV_END");

  const controller = new AbortController();
  const onClose = () => {
    if (!reply.res.writableFinished) controller.abort();
  };
  reply.res.once("close", onClose);
  try {
    const args = [body, lengthHeader, model, modelName, modelVersion, replyEncoding] as const;
    const { parts, headers } = await answerInfer(server, ...args, controller.signal, trace);
    if (!trace) return reply.send(200, parts, headers);
    trace.capture("HTTP_SEND_START");
    const sent = new Promise<void>((done) => reply.res.once("finish", done).once("close", done));
    reply.send(200, parts, headers);
    await sent;
    trace.capture("HTTP_SEND_END");
  } finally {
    reply.res.off("close", onClose);
  }
}
