// Runs claimed jobs through the core's stream path, as a gRPC stream request runs: the pipeline's
// responses become progress, previews and, at the end, the video's files. A cancelled job's
// request is aborted, so the pipeline stops at its next step.
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Logger } from "../base/log.js";
import { hostTensor, type Tensor } from "../base/tensor.js";
import type { Trace, TraceHeader } from "../base/trace.js";
import type { InferenceServer } from "../core/inference-server.js";
import type { Job, JobTraceContext, OutputVariant } from "./job.js";
import type { JobEvents } from "./job-events.js";
import type { JobStore } from "./job-store.js";
import type { Frames, VideoEncoder } from "./video-encoder.js";
import { jobInputs, videoMapping } from "./video-mapping.js";

/** How often a running job's progress is written to the store at most (previews always are). */
export const PROGRESS_WRITE_MS = 250;

/**
 * How long a cancelled job's pipeline may take to end its request (its final response) before
 * the runner stops waiting and frees the job's slot.
 */
export const CANCEL_GRACE_MS = 10_000;

/** What the runner works with. */
export interface JobRunnerOptions {
  store: JobStore;
  core: InferenceServer;
  encoder: VideoEncoder;
  events: JobEvents;
  /** Where each job's outputs go: `<outputs>/<id>/`. */
  outputs: string;
  /** This server's name on the jobs it claims. */
  owner: string;
  /**
   * Pipelines run at once by this server. A job's files are written after its pipeline has ended,
   * while the next job's runs: up to this many jobs more may be writing theirs.
   */
  concurrency: number;
  /** A client's jobs running at once across all servers (0: no limit). */
  perClient: number;
  /** How long a claim holds without renewal (ms). */
  leaseMs: number;
  /** Called with a job that reached a final status here. */
  finished: (job: Job) => void;
  log: Logger;
}

/** Claims and runs jobs. */
export class JobRunner {
  readonly #options: JobRunnerOptions;
  readonly #running = new Map<string, AbortController>();
  /** Jobs whose pipeline is running (the rest of `#running` are writing their files). */
  #pipelines = 0;
  /** The running jobs' runs, awaited by `stop`. */
  readonly #tasks = new Set<Promise<void>>();
  #stopped = false;
  #claiming = false;
  /** A fill was asked for while a claim was in flight. */
  #again = false;
  /** Seconds a job took, smoothed (for Retry-After). */
  averageSeconds = 0;

  constructor(options: JobRunnerOptions) {
    this.#options = options;
  }

  /** Jobs running here now (their pipeline, or writing their files). */
  get running(): number {
    return this.#running.size;
  }

  /** Whether another job may start: a pipeline slot free, and not too many jobs writing files. */
  get #room(): boolean {
    const { concurrency } = this.#options;
    return this.#pipelines < concurrency && this.#running.size < 2 * concurrency;
  }

  /** Claim jobs while there is room; each runs in the background. */
  async fill(): Promise<void> {
    if (this.#stopped) return;
    // A claim in flight may have looked before a job now waiting was created (PostgreSQL claims
    // and creates interleave): it claims once more when it ends, instead of leaving the job to
    // the next poll.
    if (this.#claiming) {
      this.#again = true;
      return;
    }
    this.#claiming = true;
    try {
      this.#again = true;
      while (this.#again && !this.#stopped && this.#room) {
        this.#again = false;
        await this.#claimWhileRoom();
      }
    } finally {
      this.#claiming = false;
    }
  }

  async #claimWhileRoom(): Promise<void> {
    const { store, owner, perClient, leaseMs } = this.#options;
    while (!this.#stopped && this.#room) {
      const now = Date.now();
      const job = await store.claim(owner, now, now + leaseMs, perClient);
      if (!job) break;
      if (this.#stopped) {
        // Claimed while stopping: back to the queue, as the running ones go.
        await store.finish(job.id, "queued", { now, owner });
        break;
      }
      const controller = new AbortController();
      this.#running.set(job.id, controller);
      this.#pipelines++;
      let inPipeline = true;
      // Its pipeline slot goes to the next job as soon as the model's stream has ended: encoding
      // the video and writing the files overlap that job's pipeline, as they would not if the
      // slot waited for them (a video's tail is worker round trips and store writes, a good part
      // of a short video's time).
      const pipelineEnded = () => {
        if (!inPipeline) return;
        inPipeline = false;
        this.#pipelines--;
        this.#refill();
      };
      const task = this.#run(job, controller, pipelineEnded).finally(() => {
        this.#running.delete(job.id);
        this.#tasks.delete(task);
        if (inPipeline) pipelineEnded();
        else this.#refill();
      });
      this.#tasks.add(task);
    }
  }

  #refill(): void {
    void this.fill().catch((error: unknown) => this.#options.log.error(`jobs: claim failed: ${String(error)}`));
  }

  /** Abort a job running here (cancelled in the store already); true if it ran here. */
  abort(id: string): boolean {
    const controller = this.#running.get(id);
    controller?.abort();
    return controller !== undefined;
  }

  /** Stop claiming; abort the running jobs and queue them again (a graceful stop costs no attempt of theirs). */
  async stop(): Promise<void> {
    this.#stopped = true;
    const ids = [...this.#running.keys()];
    for (const controller of this.#running.values()) controller.abort("stopping");
    // Each ends once its pipeline has ended the request (at most CANCEL_GRACE_MS).
    await Promise.all(this.#tasks);
    for (const id of ids) {
      await this.#options.store.finish(id, "queued", { now: Date.now(), owner: this.#options.owner });
    }
  }

  async #run(job: Job, controller: AbortController, pipelineEnded: () => void): Promise<void> {
    const { store, core, encoder, events, owner, log } = this.#options;
    const started = performance.now();
    const dir = join(this.#options.outputs, job.id);
    const outputs: Job["outputs"] = {};
    let trace: Trace | undefined;
    /** The previews and progress rows written so far (a chain, so they land in order). */
    let written = Promise.resolve();
    try {
      const mapping = videoMapping(core.modelConfig(job.model, ""));
      if (!mapping) throw new InferenceError("VIDEO_MODEL_NOT_FOUND", { model: job.model });
      await mkdir(dir, { recursive: true });
      const priority = mapping.priorities[job.priority];
      const request: InferenceRequest = {
        modelName: job.model,
        modelVersion: "",
        id: job.id,
        parameters: priority > 0 ? { priority: BigInt(priority) } : {},
        inputs: jobInputs(mapping, job),
        outputs: [],
        signal: controller.signal,
      };
      // One trace a run, under the caller's context when the create request carried one (then
      // traced whatever the rate, as Triton traces every propagated context); sampled as any
      // request's otherwise. The pipeline's steps and BLS calls are its children.
      trace = core.tracing.sample(job.model, traceHeader(job.traceContext));
      if (trace) request.trace = trace;
      let video: Frames | undefined;
      let lastWrite = 0;
      const responses = core.stream(request)[Symbol.asyncIterator]();
      const abandoned = new Promise<"abandoned">((resolve) =>
        controller.signal.addEventListener(
          "abort",
          () => setTimeout(() => resolve("abandoned"), CANCEL_GRACE_MS).unref(),
          { once: true },
        ),
      );
      for (;;) {
        const next = await Promise.race([responses.next(), abandoned]);
        if (next === "abandoned") {
          log.warn(`jobs: ${job.model} did not end cancelled job ${job.id} within ${CANCEL_GRACE_MS} ms`);
          break;
        }
        if (next.done) break;
        const { response, empty } = next.value;
        if (empty || controller.signal.aborted) continue;
        const find = async (name: string | undefined): Promise<Tensor | undefined> => {
          const tensor = name === undefined ? undefined : response.outputs.find((t) => t.name === name);
          return tensor ? hostTensor(tensor) : undefined;
        };
        const step = await find(mapping.progressOutput);
        let progress: number | undefined;
        if (step && step.data.byteLength >= 8) {
          const view = new DataView(step.data.buffer, step.data.byteOffset, step.data.byteLength);
          const [done, total] = [view.getInt32(0, true), view.getInt32(4, true)];
          if (total > 0) progress = Math.max(0, Math.min(99, Math.floor((done / total) * 100)));
        }
        const preview = frames(await find(mapping.previewOutput));
        video = frames(await find(mapping.videoOutput)) ?? video;
        const now = performance.now();
        if (preview || (progress !== undefined && now - lastWrite >= PROGRESS_WRITE_MS)) {
          lastWrite = now;
          // Off the stream's path, in order: the pipeline's next responses are read while a
          // preview is encoded (a worker round trip) and its row written; its event goes out once
          // its file is there.
          written = written.then(async () => {
            if (preview) {
              await encoder.still(preview, join(dir, "preview.png"));
              outputs.preview = "preview.png";
            }
            if (progress === undefined) return;
            // Cancelled through another server (or expired): stop here too.
            if (!(await store.progress(job.id, owner, progress, outputs))) controller.abort("cancelled");
            else if (preview)
              events.emit(job.id, { type: "preview", progress, url: `/v1/videos/${job.id}/content?variant=preview` });
            else events.emit(job.id, { type: "progress", progress });
          });
          // Its failure fails the job where the chain is awaited, not as an unhandled rejection.
          written.catch(() => {});
        }
      }
      pipelineEnded();
      await written;
      if (controller.signal.aborted) return;
      if (!video) throw new Error(`the model sent no ${mapping.videoOutput}`);
      const name = `video.${encoder.format.extension}`;
      await Promise.all([
        encoder.video(video, mapping.fps, join(dir, name)),
        encoder.still(video, join(dir, "thumbnail.png")),
      ]);
      const final = await store.finish(job.id, "completed", {
        now: Date.now(),
        owner,
        outputs: { ...outputs, video: name, thumbnail: "thumbnail.png" } satisfies Partial<
          Record<OutputVariant, string>
        >,
      });
      const seconds = (performance.now() - started) / 1000;
      this.averageSeconds = this.averageSeconds === 0 ? seconds : 0.8 * this.averageSeconds + 0.2 * seconds;
      if (final) this.#done(final);
    } catch (error) {
      await written.catch(() => {});
      if (controller.signal.aborted) return;
      log.error(
        `jobs: ${job.id} (${job.model}) failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
      );
      // The model's and the server's own errors are written for people; anything else is a bug
      // whose text stays in the log.
      const message =
        error instanceof InferenceError && error.id !== "INTERNAL_ERROR"
          ? error.message
          : "the video could not be made; the server log has the details";
      const code =
        error instanceof InferenceError && error.code === "INVALID_ARG" ? "invalid_request" : "generation_failed";
      const final = await store.finish(job.id, "failed", { now: Date.now(), owner, error: { code, message } });
      if (final) this.#done(final);
    } finally {
      trace?.end();
      if (controller.signal.aborted && controller.signal.reason !== "stopping") {
        await rm(dir, { recursive: true, force: true });
      }
    }
  }

  #done(job: Job): void {
    this.#options.events.emit(job.id, { type: "final" });
    this.#options.finished(job);
  }
}

/** The stored trace context as the tracer reads a caller's (undefined: none). */
function traceHeader(context: JobTraceContext | undefined): TraceHeader | undefined {
  if (!context) return undefined;
  return {
    header: (name) =>
      name === "traceparent" ? context.traceparent : name === "tracestate" ? context.tracestate : undefined,
  };
}

/** `[count, h, w, 3]` UINT8 as frames, or undefined for an empty tensor or another shape. */
function frames(tensor: Tensor | undefined): Frames | undefined {
  if (tensor?.datatype !== "UINT8" || tensor.shape.length !== 4 || tensor.shape[3] !== 3) return undefined;
  const [count = 0, height = 0, width = 0] = tensor.shape;
  if (count * height * width === 0 || tensor.data.byteLength !== count * height * width * 3) return undefined;
  return { count, height, width, rgb: tensor.data };
}
