import { InferenceError } from "../../core/errors.js";
import type { InferenceRequest } from "../../core/inference-request.js";
import type { ModelView } from "../../core/inference-server.js";
import type { Trace } from "../../core/trace.js";
import { readBody } from "./body.js";
import { requestEncoding, responseEncoding } from "./compression.js";
import { type Context, header } from "./context.js";
import { atoi, decodeInfer } from "./infer-request.js";
import { encodeInferResponse } from "./infer-response.js";
import { rawIsBytes } from "./raw-request.js";

/**
 * `POST /v2/models/{m}[/versions/{v}]/infer`, in Triton's order: the model (404 when unknown,
 * 501 when decoupled), the request encoding, the body, the JSON header and binary data, then
 * the inference; the reply is compressed as `Accept-Encoding` asks. If the client disconnects,
 * the request is cancelled.
 */
export function handleInfer(ctx: Context, modelName: string, modelVersion: string): Promise<void> {
  const model = ctx.server.model(modelName, modelVersion);
  if (model.decoupled) throw new InferenceError("DECOUPLED_HTTP");
  // Sampled here, as Triton samples once the model is known (before the body is read).
  const trace = ctx.server.tracing.sample(modelName);
  if (!trace) return infer(ctx, model, modelName, modelVersion);
  trace.capture("HTTP_RECV_START");
  return infer(ctx, model, modelName, modelVersion, trace).finally(() => trace.end());
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

  // Place the body so that the binary data after a JSON header of known length starts 8-byte
  // aligned (typed arrays over it need no copy), or so that a raw BYTES input has room for
  // its length prefix.
  const lengthHeader = header(req, "inference-header-content-length");
  const planned = lengthHeader === undefined ? -1 : atoi(lengthHeader);
  const offset = planned === 0 ? (rawIsBytes(model) ? 4 : 0) : planned > 0 ? (8 - (planned % 8)) % 8 : 0;
  const body = await readBody(req, { limit: ctx.limit, encoding, offset });
  trace?.capture("HTTP_RECV_END");

  const { request, plan } = decodeInfer(body, lengthHeader, model, modelName, modelVersion);
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.res.writableFinished) controller.abort();
  };
  reply.res.once("close", onClose);
  try {
    // Resolved again: the model may have been unloaded while the body was read.
    const call: InferenceRequest = { ...request, signal: controller.signal };
    if (trace) call.trace = trace;
    const response = await server.infer(call);
    const { parts, headers } = encodeInferResponse(response, plan);
    if (!trace) return await reply.sendEncoded(200, parts, headers, replyEncoding);
    trace.capture("INFER_RESPONSE_COMPLETE");
    trace.capture("HTTP_SEND_START");
    const sent = new Promise<void>((done) => reply.res.once("finish", done).once("close", done));
    await reply.sendEncoded(200, parts, headers, replyEncoding);
    await sent;
    trace.capture("HTTP_SEND_END");
  } finally {
    reply.res.off("close", onClose);
  }
}
