// Step-level batching of the users' denoising loops, as LLM servers batch tokens ("continuous
// batching"): every loop hands its next step here, and one denoiser call carries the steps of all
// loops whose latents have the same shape, each at its own timestep with its own text embedding.
// While a group's call is running, loops that reach their next step (a new video out of
// encode_prompt, one back from a preview) wait for it to return and go in the next call, with the
// loops it carried. So the loops advance in lockstep and the denoiser sees every user at every
// step, without the dynamic batcher guessing how long to wait for users who are busy elsewhere in
// their videos — what a client driving the steps itself cannot do. Nothing waits: a loop that
// arrives while a call runs joins the next one, one call later at most (waiting for videos about
// to take their first step was tried on the H200 and gained nothing).
import type { InputTensor, ModelContext, OutputTensor } from "@galley/server/model";

/** One loop's step: its latent [keyframes, 4, h, w], timestep and embedding [1, 32, 64]. */
interface Step {
  latent: Float32Array;
  t: number;
  embedding: InputTensor;
  signal: AbortSignal;
  resolve(eps: Float32Array): void;
  reject(error: unknown): void;
  onAbort?: () => void;
}

interface Group {
  /** Latent shape without the batch dimension. */
  shape: number[];
  waiting: Step[];
  /** Denoiser calls of this group still running. */
  running: number;
  scheduled: boolean;
}

const fp32 = (name: string, shape: number[], data: Float32Array): OutputTensor => ({
  name,
  datatype: "FP32",
  shape,
  data,
});

function aborted(): Error {
  return Object.assign(new Error("Request was cancelled"), { code: "CANCELLED" });
}

/** Concatenates equal-length float arrays. */
function concat(parts: readonly Float32Array[]): Float32Array {
  if (parts.length === 1) return parts[0] as Float32Array;
  const size = parts[0]?.length ?? 0;
  const out = new Float32Array(size * parts.length);
  for (let i = 0; i < parts.length; i++) out.set(parts[i] as Float32Array, i * size);
  return out;
}

/** Batches the denoising loops' steps into denoiser calls of up to `maxBatch` users each. */
export class StepBatches {
  readonly #context: ModelContext;
  readonly #model: string;
  readonly #maxBatch: number;
  readonly #groups = new Map<string, Group>();

  /** @param maxBatch users per denoiser call (at most the denoiser's `max_batch_size`) */
  constructor(context: ModelContext, model: string, maxBatch: number) {
    this.#context = context;
    this.#model = model;
    this.#maxBatch = maxBatch;
  }

  /**
   * The denoiser's noise prediction for `latent` (shape `shape`) at timestep `t`. Rejects with a
   * CANCELLED error once `signal` aborts before the step's call is made; a call already running
   * for several users is cancelled only when all of them have cancelled.
   */
  step(
    latent: Float32Array,
    shape: number[],
    t: number,
    embedding: InputTensor,
    signal: AbortSignal,
  ): Promise<Float32Array> {
    if (signal.aborted) return Promise.reject(aborted());
    // One user per call: every step its own request, batched (or not) by the denoiser's queue.
    if (this.#maxBatch === 1) return this.#infer(shape, [{ latent, t, embedding }], signal);
    const key = shape.join("x");
    let group = this.#groups.get(key);
    if (!group) {
      group = { shape, waiting: [], running: 0, scheduled: false };
      this.#groups.set(key, group);
    }
    let resolve!: (eps: Float32Array) => void;
    let reject!: (error: unknown) => void;
    const promise = new Promise<Float32Array>((yes, no) => {
      resolve = yes;
      reject = no;
    });
    const step: Step = { latent, t, embedding, signal, resolve, reject };
    const waiting = group.waiting;
    const onAbort = () => {
      const at = waiting.indexOf(step);
      if (at < 0) return;
      waiting.splice(at, 1);
      reject(aborted());
    };
    step.onAbort = onAbort;
    signal.addEventListener("abort", onAbort, { once: true });
    waiting.push(step);
    this.#schedule(group);
    return promise;
  }

  /**
   * Looks at the group after this turn (loops resumed by one call's answer all come back in the
   * same turn), unless a call of the group is still running: its loops join then.
   */
  #schedule(group: Group): void {
    if (group.scheduled || group.running > 0) return;
    group.scheduled = true;
    const look = () => {
      group.scheduled = false;
      this.#flush(group);
    };
    setImmediate(look);
  }

  /** Sends the waiting steps, up to `maxBatch` per call. */
  #flush(group: Group): void {
    if (group.running > 0) return;
    const steps = group.waiting.splice(0);
    for (let i = 0; i < steps.length; i += this.#maxBatch) this.#call(group, steps.slice(i, i + this.#maxBatch));
  }

  #call(group: Group, steps: Step[]): void {
    group.running++;
    const controller = new AbortController();
    let cancelled = 0;
    const onMemberAbort = () => {
      if (++cancelled === steps.length) controller.abort();
    };
    for (const step of steps) {
      step.signal.removeEventListener("abort", step.onAbort as () => void);
      step.signal.addEventListener("abort", onMemberAbort, { once: true });
    }
    const settle = (outcome: { eps: Float32Array } | { error: unknown }) => {
      for (const step of steps) step.signal.removeEventListener("abort", onMemberAbort);
      const size = steps[0]?.latent.length ?? 0;
      steps.forEach((step, i) => {
        if ("eps" in outcome) step.resolve(outcome.eps.subarray(i * size, (i + 1) * size));
        else step.reject(outcome.error);
      });
      group.running--;
      if (group.waiting.length > 0) this.#schedule(group);
    };
    this.#infer(group.shape, steps, controller.signal).then(
      (eps) => settle({ eps }),
      (error: unknown) => settle({ error }),
    );
  }

  /** One denoiser call for `steps` (latents of shape `shape`): the noise predictions, back to back. */
  async #infer(
    shape: readonly number[],
    steps: readonly Pick<Step, "latent" | "t" | "embedding">[],
    signal: AbortSignal,
  ): Promise<Float32Array> {
    const n = steps.length;
    const embeddingShape = steps[0]?.embedding.shape.slice(1) ?? [];
    const reply = await this.#context.infer({
      model: this.#model,
      inputs: [
        fp32("LATENT", [n, ...shape], concat(steps.map((s) => s.latent))),
        fp32(
          "TIMESTEP",
          [n, 1],
          Float32Array.from(steps, (s) => s.t),
        ),
        fp32("TEXT_EMBEDDING", [n, ...embeddingShape], concat(steps.map((s) => s.embedding.typed() as Float32Array))),
      ],
      signal,
      // A lockstep call carries every loop already: nothing is gained from the denoiser's batcher
      // (its waits would stall them all) or from a trip through the main thread. Where the
      // denoiser allows it (the PyTorch backend), the call runs on its thread from this one.
      direct: this.#maxBatch > 1,
    });
    const eps = reply.output("NOISE_PRED")?.typed();
    if (!(eps instanceof Float32Array)) throw new Error(`${this.#model} returned no NOISE_PRED`);
    return eps;
  }
}
