import type { ServerResponse } from "node:http";
import { type ErrorId, hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceRequest, StreamedResponse } from "../../base/inference-request.js";
import type { Trace } from "../../base/trace.js";
import { readBody } from "./body.js";
import { type Context, header } from "./context.js";
import { decodeGenerate } from "./generate-request.js";
import { encodeGenerateResponse } from "./generate-response.js";
import { httpStatus } from "./http-status.js";
import { internalError, invalidArgument, parseBody } from "./json-access.js";
import { jsonBytes } from "./json-write.js";

const ONE_RESPONSE =
  "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses";
const IDENTITY_ONLY = "Unsupported content-encoding, only 'identity' is supported.";
const SSE = { "Content-Type": "text/event-stream; charset=utf-8" };
const DATA = Buffer.from("data: ");
const END = Buffer.from("\n\n");

/**
 * Errors that a response carries (the model's, or the scheduler's once the request was
 * accepted) rather than the request's own checks: on generate_stream they are events even when
 * they come first, as in Triton.
 */
const RESPONSE_ERRORS: ReadonlySet<ErrorId> = new Set<ErrorId>([
  "BACKEND_FAILED",
  "ENSEMBLE_STEP_FAILED",
  "QUEUE_TIMEOUT",
]);

/**
 * `POST /v2/models/{m}[/versions/{v}]/generate` and `.../generate_stream` (PROTOCOL.md §1.10),
 * in Triton's order: the model (404 when unknown), the request encoding (only identity), the
 * body, its conversion to inputs and parameters, then the inference on any model, decoupled
 * or not. `/generate` answers exactly one response as JSON; `/generate_stream` answers each
 * response as a server-sent event. If the client disconnects, the request is cancelled.
 */
export async function handleGenerate(
  ctx: Context,
  modelName: string,
  modelVersion: string,
  streaming: boolean,
): Promise<void> {
  // Sampled before the model is looked up, as Triton's generate endpoints do.
  const trace = ctx.server.tracing.sample(modelName);
  if (!trace) return generate(ctx, modelName, modelVersion, streaming);
  trace.capture("HTTP_RECV_START");
  try {
    await generate(ctx, modelName, modelVersion, streaming, trace);
  } finally {
    trace.end();
  }
}

async function generate(
  ctx: Context,
  modelName: string,
  modelVersion: string,
  streaming: boolean,
  trace?: Trace,
): Promise<void> {
  const { req, reply, server } = ctx;
  const metadata = server.modelMetadata(modelName, modelVersion);
  const encoding = header(req, "content-encoding");
  // Triton reads generate bodies as they arrive: even gzip and deflate are refused.
  if (encoding !== undefined && encoding !== "" && encoding !== "identity") throw invalidArgument(IDENTITY_ONLY);
  const body = await readBody(req, { limit: ctx.limit, encoding: "identity" });
  const request: InferenceRequest = decodeGenerate(parseBody(body.bytes), metadata.inputs, modelName, modelVersion);
  trace?.capture("HTTP_RECV_END");

  const controller = new AbortController();
  const onClose = () => {
    if (!reply.res.writableFinished) controller.abort();
  };
  reply.res.once("close", onClose);
  try {
    const call: InferenceRequest = { ...request, signal: controller.signal };
    if (trace) call.trace = trace;
    const responses = server.stream(call);
    await (streaming
      ? streamEvents(ctx, responses, controller.signal, trace)
      : answerOne(ctx, responses, controller.signal, trace));
  } finally {
    reply.res.off("close", onClose);
  }
}

// Both answers read the responses to the end even once the client is gone (`gone`): the aborted
// signal makes the model stop early, and the core then sees the request end and accounts for it.

/** `/generate`: the one response, or Triton's error when there are none or several. */
async function answerOne(
  { reply }: Context,
  responses: AsyncIterable<StreamedResponse>,
  gone: AbortSignal,
  trace?: Trace,
): Promise<void> {
  let body: Uint8Array | undefined;
  let count = 0;
  try {
    for await (const { response, empty } of responses) {
      if (empty || gone.aborted) continue;
      if (count === 0) body = encodeGenerateResponse(response);
      count++;
    }
  } catch (error) {
    // An error is a response too: alone it is the answer, after another it is one too many.
    if (count === 0) throw error;
    count++;
  }
  if (count !== 1 || !body) throw internalError(ONE_RESPONSE);
  if (!trace) return reply.send(200, [body], { "Content-Type": "application/json" });
  trace.capture("INFER_RESPONSE_COMPLETE");
  trace.capture("HTTP_SEND_START");
  const sent = new Promise<void>((done) => reply.res.once("finish", done).once("close", done));
  reply.send(200, [body], { "Content-Type": "application/json" });
  await sent;
  trace.capture("HTTP_SEND_END");
}

/**
 * `/generate_stream`: `data: {json}\n\n` per response (flag-only finals send nothing). The
 * status goes out with the first event, so a later error is an event `data: {"error":"..."}`.
 * An error before any event is an ordinary JSON error, unless a response carried it.
 */
async function streamEvents(
  { reply, server, req }: Context,
  responses: AsyncIterable<StreamedResponse>,
  gone: AbortSignal,
  trace?: Trace,
): Promise<void> {
  const res = reply.res;
  let failure: InferenceError | undefined;
  try {
    for await (const { response, empty } of responses) {
      if (empty || gone.aborted) continue;
      const event = encodeGenerateResponse(response);
      if (!res.headersSent) {
        trace?.capture("INFER_RESPONSE_COMPLETE");
        trace?.capture("HTTP_SEND_START");
        reply.begin(200, SSE);
      }
      await write(res, Buffer.concat([DATA, event, END]));
    }
  } catch (error) {
    const carried = error instanceof InferenceError && RESPONSE_ERRORS.has(error.id);
    if (!res.headersSent && !carried) throw error;
    failure = toInferenceError(error);
    const detail = error instanceof InferenceError ? hiddenCause(failure) : String(error);
    if (detail !== undefined) server.log.error(`HTTP POST ${req.url}: ${detail}`);
  }
  if (gone.aborted) return;
  if (!res.headersSent) reply.begin(failure ? httpStatus(failure) : 200, SSE);
  if (failure) await write(res, Buffer.concat([DATA, jsonBytes({ error: failure.message }), END]));
  if (!trace) {
    res.end();
    return;
  }
  await new Promise<void>((done) => res.end(done));
  trace.capture("HTTP_SEND_END");
}

/** Write a chunk; when the socket's buffer is full, wait until it drains or closes. */
function write(res: ServerResponse, chunk: Uint8Array): Promise<void> {
  if (res.write(chunk)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}
