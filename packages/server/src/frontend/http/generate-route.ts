import { type ErrorId, hiddenCause, InferenceError, toInferenceError } from "../../base/errors.js";
import type { InferenceRequest, StreamedResponse } from "../../base/inference-request.js";
import type { Logger } from "../../base/log.js";
import type { Trace } from "../../base/trace.js";
import type { HttpAnswer } from "../transport/http-exchange.js";
import type { Context } from "./context.js";
import { decodeGenerate } from "./generate-request.js";
import { encodeGenerateResponse } from "./generate-response.js";
import { httpStatus } from "./http-status.js";
import { internalError, invalidArgument, parseBody } from "./json-access.js";
import { jsonBytes } from "./json-write.js";
import { endpointLoadMetrics, LOAD_METRICS, LOAD_METRICS_FORMAT } from "./load-report.js";

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
): Promise<HttpAnswer> {
  // Sampled before the model is looked up, as Triton's generate endpoints do.
  const trace = ctx.server.tracing.sample(modelName, ctx.request);
  if (!trace) return generate(ctx, modelName, modelVersion, streaming);
  trace.capture("HTTP_RECV_START");
  try {
    const answer = await generate(ctx, modelName, modelVersion, streaming, trace);
    answer.trace = trace;
    return answer;
  } catch (error) {
    trace.end();
    throw error;
  }
}

async function generate(
  ctx: Context,
  modelName: string,
  modelVersion: string,
  streaming: boolean,
  trace?: Trace,
): Promise<HttpAnswer> {
  const { request, server } = ctx;
  // With loading on demand, a model not loaded yet is loaded first (bounded by the server's limit).
  const found = server.inferenceModel(modelName, modelVersion, { signal: request.signal });
  if (found instanceof Promise) await found;
  const metadata = server.modelMetadata(modelName, modelVersion);
  const encoding = request.header("content-encoding");
  // Triton reads generate bodies as they arrive: even gzip and deflate are refused.
  if (encoding !== undefined && encoding !== "" && encoding !== "identity") throw invalidArgument(IDENTITY_ONLY);
  const body = await request.body({ limit: ctx.limit, encoding: "identity" });
  const decoded = decodeGenerate(parseBody(body.bytes), metadata.inputs, modelName, modelVersion);
  trace?.capture("HTTP_RECV_END");
  const call: InferenceRequest = { ...decoded, signal: request.signal };
  if (trace) call.trace = trace;
  const responses = server.stream(call);
  const answer = streaming
    ? await streamEvents(responses, request.signal, server.log, `HTTP POST ${request.target}`, trace)
    : await answerOne(responses, request.signal, trace);
  return withLoadReport(ctx, answer);
}

/**
 * A load report on a response that starts (Triton's `StartResponse`), when the request asked for
 * one with `endpoint-load-metrics-format` and metrics are on: read once the answer's status is
 * known, so it tells the load as the response leaves. A format other than `text` or `json` gets
 * no header and an error logged, as in Triton.
 */
function withLoadReport(ctx: Context, answer: HttpAnswer): HttpAnswer {
  const format = ctx.request.header(LOAD_METRICS_FORMAT);
  if (format === undefined || !ctx.load) return answer;
  const report = endpointLoadMetrics(format, ctx.server.readyModels(), ctx.load);
  if (report === undefined) {
    ctx.server.log.error(
      `${LOAD_METRICS_FORMAT} is set to an invalid type: ${format}; no ${LOAD_METRICS} header written`,
    );
    return answer;
  }
  answer.headers = { ...answer.headers, [LOAD_METRICS]: report };
  return answer;
}

// Both answers read the responses to the end even once the client is gone (`gone`): the aborted
// signal makes the model stop early, and the core then sees the request end and accounts for it.

/** `/generate`: the one response, or Triton's error when there are none or several. */
async function answerOne(
  responses: AsyncIterable<StreamedResponse>,
  gone: AbortSignal,
  trace?: Trace,
): Promise<HttpAnswer> {
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
  trace?.capture("INFER_RESPONSE_COMPLETE");
  return { status: 200, headers: { "Content-Type": "application/json" }, parts: [body] };
}

/**
 * `/generate_stream`: `data: {json}\n\n` per response (flag-only finals send nothing). The
 * status goes out with the first event, so a later error is an event `data: {"error":"..."}`.
 * An error before any event is an ordinary JSON error, unless a response carried it. The answer
 * is returned once the first event (or the end, or an error) is known; the rest follows as a stream.
 */
async function streamEvents(
  responses: AsyncIterable<StreamedResponse>,
  gone: AbortSignal,
  log: Logger,
  where: string,
  trace?: Trace,
): Promise<HttpAnswer> {
  const iterator = responses[Symbol.asyncIterator]();
  const event = (response: StreamedResponse["response"]) =>
    Buffer.concat([DATA, encodeGenerateResponse(response), END]);
  const errorEvent = (error: unknown): Uint8Array => {
    const failure = toInferenceError(error);
    const detail = error instanceof InferenceError ? hiddenCause(failure) : String(error);
    if (detail !== undefined) log.error(`${where}: ${detail}`);
    return Buffer.concat([DATA, jsonBytes({ error: failure.message }), END]);
  };

  // Up to the first event: its absence and an error before it decide the status.
  let first: Uint8Array | undefined;
  let status = 200;
  let done = false;
  try {
    for (;;) {
      const next = await iterator.next();
      if (next.done) {
        done = true;
        break;
      }
      if (next.value.empty || gone.aborted) continue;
      first = event(next.value.response);
      break;
    }
  } catch (error) {
    const carried = error instanceof InferenceError && RESPONSE_ERRORS.has(error.id);
    if (!carried) throw error;
    status = httpStatus(toInferenceError(error));
    first = errorEvent(error);
    done = true;
  }
  if (first && status === 200) trace?.capture("INFER_RESPONSE_COMPLETE");

  async function* rest(): AsyncGenerator<Uint8Array> {
    if (first) yield first;
    if (done) return;
    try {
      for (;;) {
        const next = await iterator.next();
        if (next.done) return;
        if (next.value.empty || gone.aborted) continue;
        yield event(next.value.response);
      }
    } catch (error) {
      const failed = errorEvent(error);
      if (!gone.aborted) yield failed;
    }
  }
  return { status, headers: SSE, stream: rest() };
}
