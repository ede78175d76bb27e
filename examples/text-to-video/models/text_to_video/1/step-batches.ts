// Step-level batching of the users' denoising loops, as LLM servers batch tokens ("continuous
// batching"): every loop hands its next step here, and the steps of all loops whose latents have
// the same shape go to the denoiser together, each at its own timestep with its own text
// embedding: one direct call per step, all made in one turn, which the server runs as one batch
// (`BlsRequest.direct`: calls a model's worker makes in one turn share a batch). While a group's
// calls are running, loops that reach their next step (a new video out of encode_prompt, one back
// from a preview) wait for them to return and go in the next turn's batch, with the loops they
// carried. So the loops advance in lockstep and the denoiser sees every user at every step,
// without the dynamic batcher guessing how long to wait for users who are busy elsewhere in their
// videos — what a client driving the steps itself cannot do. Nothing waits: a loop that arrives
// while a batch runs joins the next one, one batch later at most (waiting for videos about to take
// their first step was tried on the H200 and gained nothing). A step's latent and noise
// prediction may be tensors held on a GPU (`preferredMemory`): they stay there.
import type { BlsRequest, InputTensor, ModelContext, OutputTensor } from "@galley/server/model";

/** One loop's step: its latent [1, keyframes, 4, h, w], timestep and embedding [1, 77, width]. */
interface Step {
  latent: OutputTensor;
  t: number;
  embedding: InputTensor;
  signal: AbortSignal;
  resolve(eps: InputTensor): void;
  reject(error: unknown): void;
  onAbort?: () => void;
}

interface Group {
  waiting: Step[];
  /** Steps of this group whose calls are still running. */
  running: number;
  scheduled: boolean;
}

function aborted(): Error {
  return Object.assign(new Error("Request was cancelled"), { code: "CANCELLED" });
}

/** The next turn of the event loop (calls made in different turns are batched apart). */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Batches the denoising loops' steps into denoiser calls of up to `maxBatch` users each. */
export class StepBatches {
  readonly #context: ModelContext;
  readonly #model: string;
  readonly #maxBatch: number;
  readonly #memory: BlsRequest["preferredMemory"];
  readonly #groups = new Map<string, Group>();

  /**
   * @param maxBatch users per denoiser batch (at most the denoiser's `max_batch_size`); 1: each
   *   step is a request of its own, for the denoiser's dynamic batcher to batch
   * @param memory where the noise predictions should stay (a GPU: the next model takes them there)
   */
  constructor(context: ModelContext, model: string, maxBatch: number, memory?: BlsRequest["preferredMemory"]) {
    this.#context = context;
    this.#model = model;
    this.#maxBatch = maxBatch;
    this.#memory = memory;
  }

  /**
   * The denoiser's noise prediction (NOISE_PRED, shaped as `latent`) for `latent` at timestep
   * `t`. Rejects with a CANCELLED error once `signal` aborts, before or during the step's call.
   */
  step(latent: OutputTensor, t: number, embedding: InputTensor, signal: AbortSignal): Promise<InputTensor> {
    if (signal.aborted) return Promise.reject(aborted());
    // One user per call: every step its own request, batched (or not) by the denoiser's queue.
    if (this.#maxBatch === 1) return this.#infer({ latent, t, embedding, signal }, false);
    const key = latent.shape.join("x");
    let group = this.#groups.get(key);
    if (!group) {
      group = { waiting: [], running: 0, scheduled: false };
      this.#groups.set(key, group);
    }
    let resolve!: (eps: InputTensor) => void;
    let reject!: (error: unknown) => void;
    const promise = new Promise<InputTensor>((yes, no) => {
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
   * Looks at the group after this turn (loops resumed by one batch's answers all come back in the
   * same turn), unless a batch of the group is still running: its loops join then.
   */
  #schedule(group: Group): void {
    if (group.scheduled || group.running > 0) return;
    group.scheduled = true;
    setImmediate(() => {
      group.scheduled = false;
      void this.#flush(group);
    });
  }

  /** Sends the waiting steps: up to `maxBatch` a turn, each turn's calls one batch. */
  async #flush(group: Group): Promise<void> {
    if (group.running > 0) return;
    const steps = group.waiting.splice(0);
    group.running = steps.length;
    const done = () => {
      if (--group.running === 0 && group.waiting.length > 0) this.#schedule(group);
    };
    for (let i = 0; i < steps.length; i += this.#maxBatch) {
      if (i > 0) await nextTurn();
      for (const step of steps.slice(i, i + this.#maxBatch)) {
        step.signal.removeEventListener("abort", step.onAbort as () => void);
        this.#infer(step, true).then(
          (eps) => {
            step.resolve(eps);
            done();
          },
          (error: unknown) => {
            step.reject(error);
            done();
          },
        );
      }
    }
  }

  /** One step's denoiser call; `direct`: from this thread, with the other calls of its turn. */
  async #infer(step: Pick<Step, "latent" | "t" | "embedding" | "signal">, direct: boolean): Promise<InputTensor> {
    const reply = await this.#context.infer({
      model: this.#model,
      inputs: [
        { ...step.latent, name: "LATENT" },
        { name: "TIMESTEP", datatype: "FP32", shape: [1, 1], data: Float32Array.of(step.t) },
        { ...step.embedding, name: "TEXT_EMBEDDING" },
      ],
      signal: step.signal,
      // A lockstep batch carries every loop already: nothing is gained from the denoiser's
      // batcher (its waits would stall them all) or from a trip through the main thread. Where
      // the denoiser allows it (the PyTorch backend), the call runs on its thread from this one.
      direct,
      ...(this.#memory ? { preferredMemory: this.#memory } : {}),
    });
    const eps = reply.output("NOISE_PRED");
    if (!eps) throw new Error(`${this.#model} returned no NOISE_PRED`);
    return eps;
  }
}
