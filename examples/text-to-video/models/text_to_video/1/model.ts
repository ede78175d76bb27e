// text_to_video: the pipeline, as a decoupled scripted model that drives the other models with
// BLS calls. For each request, in the background:
//
//   preflight -> encode_prompt (tokenizer -> text_encoder) -> STEPS x denoiser, DDIM updates here
//   or in `ddim_model` (a preview through vae_decoder every PREVIEW_EVERY steps) -> vae_decoder ->
//   upscale_video (super_resolution -> frame_interpolation)
//
// streaming one response per step and a final one with the video. The users' loops hand their
// steps to one StepBatches (step-batches.ts): the steps of every user whose latent has that shape
// go to the denoiser as one batch, up to step_batch_size users, so concurrent users' loops run in
// lockstep. With `latent_device` (and `ddim_model`), the text embedding, latents and noise
// predictions stay on that GPU from call to call and each step is answered once it is queued
// there: the loop reads x0 back only for a preview and at the end. A cancelled request stops its
// loop at the next step; a batch goes on for the users it carries that have not cancelled.
import type {
  BlsResponse,
  InitializeArgs,
  InputTensor,
  Model,
  ModelContext,
  OutputTensor,
  Request,
  ResponseSender,
} from "@galley/server/model";
import { alphas, ddimStep, timesteps } from "./ddim.js";
import { StepBatches } from "./step-batches.js";

const LATENT_CHANNELS = 4;
/** Output pixels per latent pixel: 8 (VAE) × 4 (super-resolution). */
const LATENT_FACTOR = 32;

function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function noise(seed: number, count: number): Float32Array {
  const random = mulberry32(seed);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const u = Math.max(random(), 1e-12);
    out[i] = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
  }
  return out;
}

/** FNV-1a of the prompt: the default seed, so one prompt always gives one video. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(text)) h = Math.imul(h ^ b, 0x01000193);
  return h >>> 0;
}

const int32 = (name: string, shape: number[], values: number[]): OutputTensor => ({
  name,
  datatype: "INT32",
  shape,
  data: Int32Array.from(values),
});
const fp32 = (name: string, shape: number[], data: Float32Array): OutputTensor => ({
  name,
  datatype: "FP32",
  shape,
  data,
});
const empty = (name: string): OutputTensor => ({
  name,
  datatype: "UINT8",
  shape: [0, 0, 0, 3],
  data: new Uint8Array(0),
});
const asInput = (tensor: InputTensor, name: string): OutputTensor => ({
  name,
  datatype: tensor.datatype,
  shape: tensor.shape,
  data: tensor.data,
});

function output(response: BlsResponse, name: string): InputTensor {
  const tensor = response.output(name);
  if (!tensor) throw new Error(`${response.modelName} returned no ${name}`);
  return tensor;
}

/** Planar [n, 3, h, w] floats in [0, 1] -> interleaved [n, h, w, 3] bytes. */
function toBytes(image: Float32Array, n: number, h: number, w: number): Uint8Array {
  const plane = h * w;
  const out = new Uint8Array(n * plane * 3);
  for (let f = 0; f < n; f++)
    for (let p = 0; p < plane; p++)
      for (let c = 0; c < 3; c++)
        out[(f * plane + p) * 3 + c] = Math.round(Math.min(1, Math.max(0, image[(f * 3 + c) * plane + p] ?? 0)) * 255);
  return out;
}

export default class TextToVideo implements Model {
  #stepBatchSize = 1;
  #steps?: StepBatches;
  /** The model doing the DDIM update (`ddim_model`); the update runs here when absent. */
  #ddimModel?: string;
  /** Where the loop's tensors stay between calls (`latent_device`, a GPU); host bytes when absent. */
  #gpu?: { kind: "gpu"; deviceId: number };

  initialize(args: InitializeArgs): void {
    const config = JSON.parse(args.model_config) as { parameters?: Record<string, { string_value: string }> };
    const parameter = (key: string) => config.parameters?.[key]?.string_value;
    const text = parameter("step_batch_size") ?? "1";
    const size = Number(text);
    if (!Number.isInteger(size) || size < 1)
      throw new Error(`step_batch_size must be a whole number >= 1, not '${text}'`);
    this.#stepBatchSize = size;
    const ddim = parameter("ddim_model");
    if (ddim !== undefined && ddim !== "") this.#ddimModel = ddim;
    const device = parameter("latent_device");
    if (device !== undefined && device !== "") {
      const id = Number(device);
      if (!Number.isInteger(id) || id < 0) throw new Error(`latent_device must be a GPU's number, not '${device}'`);
      // The update on the host would need the latents there: keeping them on a GPU needs the model.
      if (!this.#ddimModel) throw new Error("latent_device needs ddim_model (the DDIM update on that GPU)");
      this.#gpu = { kind: "gpu", deviceId: id };
    }
  }

  execute(requests: readonly Request[], context: ModelContext): void {
    this.#steps ??= new StepBatches(context, "denoiser", this.#stepBatchSize, this.#gpu);
    for (const request of requests) {
      const sender = request.responseSender();
      void this.#run(request, sender, context).catch((error: unknown) => {
        // Pass the failing model's message and Triton code (INVALID_ARG from preflight) on.
        const { message, code } = error as { message: string; code?: string };
        if (!request.isCancelled())
          sender.send({ error: Object.assign(new Error(message), { code }) }, { final: true });
        else sender.send(undefined, { final: true });
      });
    }
  }

  async #run(request: Request, sender: ResponseSender, context: ModelContext): Promise<void> {
    const batches = this.#steps as StepBatches;
    const signal = request.signal;
    const optional = (name: string) => (request.input(name) ? [request.input(name) as InputTensor] : []);
    const checked = await context.infer({
      model: "preflight",
      inputs: [
        request.input("PROMPT") as InputTensor,
        ...optional("RESOLUTION"),
        ...optional("FRAMES"),
        ...optional("STEPS"),
      ],
      signal,
    });
    const value = (name: string) => output(checked, name).typed()[0] as number;
    const [height, width, frames, keyframes, steps] = ["HEIGHT", "WIDTH", "FRAMES", "KEYFRAMES", "STEPS"].map(value);
    const total = (steps as number) + 2;
    const send = (
      stage: string,
      step: number,
      extra: Partial<Record<"PREVIEW" | "VIDEO", OutputTensor>> = {},
      final = false,
    ) =>
      sender.send(
        {
          outputs: [
            { name: "STAGE", datatype: "BYTES", shape: [1], data: [stage] },
            int32("STEP", [2], [step, total]),
            extra.PREVIEW ?? empty("PREVIEW"),
            extra.VIDEO ?? empty("VIDEO"),
          ],
        },
        { final },
      );
    if (value("BLOCKED")) {
      // The pre-check's other answer: a default frame (mid grey) instead of a generated video.
      const frame = new Uint8Array((height as number) * (width as number) * 3).fill(128);
      send(
        "blocked",
        total,
        { VIDEO: { name: "VIDEO", datatype: "UINT8", shape: [1, height as number, width as number, 3], data: frame } },
        true,
      );
      return;
    }

    const prompt = request.input("PROMPT")?.strings()[0] ?? "";
    const embedding = await this.#encode(prompt, context, signal);

    const h = (height as number) / LATENT_FACTOR;
    const w = (width as number) / LATENT_FACTOR;
    const k = keyframes as number;
    const shape = [k, LATENT_CHANNELS, h, w];
    const seed = (request.input("SEED")?.typed()[0] as number | undefined) ?? hash(prompt);
    const sample = [1, ...shape];
    let latent: OutputTensor = fp32("LATENT", sample, noise(seed, k * LATENT_CHANNELS * h * w));
    let x0: Float32Array = new Float32Array(k * LATENT_CHANNELS * h * w);
    const previewEvery = (request.input("PREVIEW_EVERY")?.typed()[0] as number | undefined) ?? 0;
    // A response per step costs CPU (a message to the main thread, a gRPC message to encode and
    // the client's decoding: ~1.7 ms on a 2-core VM, about a quarter of a 64x64 video's CPU at 20 steps):
    // a client that only draws a bar asks for one at most every PROGRESS_INTERVAL_MS (galley-video: 100 ms).
    const interval = (request.input("PROGRESS_INTERVAL_MS")?.typed()[0] as number | undefined) ?? 0;
    let lastProgress = Number.NEGATIVE_INFINITY;
    const n = steps as number;
    for (let step = 0; step < n; step++) {
      // A cancelled request still ends with a (bare) final response: whoever streams it sees it end.
      if (signal.aborted) return sender.send(undefined, { final: true });
      const { t, prev } = timesteps(step, n);
      const eps = await batches.step(latent, t, embedding, signal);
      const preview = previewEvery > 0 && ((step + 1) % previewEvery === 0 || step + 1 === n);
      // DDIM (eta = 0): predict the clean latent, then step to the previous timestep.
      if (this.#ddimModel) {
        const updated = await context.infer({
          model: this.#ddimModel,
          inputs: [
            { ...latent, name: "LATENT" },
            { ...eps, name: "NOISE_PRED" },
            fp32("ALPHAS", [1, 2], Float32Array.from(alphas(t, prev))),
          ],
          signal,
          direct: true,
          // On the GPU, except where the loop reads x0 here: a preview, the last step.
          ...(this.#gpu && !preview && step + 1 < n ? { preferredMemory: this.#gpu } : {}),
        });
        latent = output(updated, "NEXT_LATENT__0");
        const clean = output(updated, "X0__1");
        if (!clean.device) x0 = clean.typed() as Float32Array;
      } else {
        let next: Float32Array;
        ({ next, x0 } = ddimStep(latent.data as Float32Array, eps.typed() as Float32Array, t, prev));
        latent = fp32("LATENT", sample, next);
      }
      if (preview) {
        // The middle keyframe as the model currently sees it, at keyframe resolution.
        const middle = Math.floor(k / 2) * LATENT_CHANNELS * h * w;
        const decoded = await context.infer({
          model: "vae_decoder",
          inputs: [fp32("LATENT", [1, LATENT_CHANNELS, h, w], x0.slice(middle, middle + LATENT_CHANNELS * h * w))],
          signal,
        });
        const [, , ph = 0, pw = 0] = output(decoded, "IMAGE").shape;
        const preview = toBytes(output(decoded, "IMAGE").typed() as Float32Array, 1, ph, pw);
        send("denoise", step + 1, {
          PREVIEW: { name: "PREVIEW", datatype: "UINT8", shape: [1, ph, pw, 3], data: preview },
        });
        lastProgress = performance.now();
      } else if (interval <= 0 || performance.now() - lastProgress >= interval) {
        send("denoise", step + 1);
        lastProgress = performance.now();
      }
    }
    if (signal.aborted) return sender.send(undefined, { final: true });
    const decoded = await context.infer({ model: "vae_decoder", inputs: [fp32("LATENT", shape, x0)], signal });
    send("decode", n + 1);
    const video = await context.infer({
      model: "upscale_video",
      inputs: [asInput(output(decoded, "IMAGE"), "FRAMES"), int32("FRAME_COUNT", [1], [frames as number])],
      signal,
    });
    send("done", total, { VIDEO: asInput(output(video, "VIDEO"), "VIDEO") }, true);
  }

  /**
   * The prompt's text embedding [1, 77, width]: encode_prompt's answer, or, with `latent_device`,
   * its two steps called here so that the embedding stays on that GPU (a direct call to
   * text_encoder keeps it as this worker's tensor, which every denoiser step then takes in place).
   */
  async #encode(prompt: string, context: ModelContext, signal: AbortSignal): Promise<InputTensor> {
    const text: OutputTensor = { name: "PROMPT", datatype: "BYTES", shape: [1, 1], data: [prompt] };
    if (!this.#gpu) return output(await context.infer({ model: "encode_prompt", inputs: [text], signal }), "EMBEDDING");
    const tokens = output(await context.infer({ model: "tokenizer", inputs: [text], signal }), "TOKENS");
    const encoded = await context.infer({
      model: "text_encoder",
      inputs: [asInput(tokens, "TOKENS")],
      signal,
      direct: true,
      preferredMemory: this.#gpu,
    });
    return output(encoded, "EMBEDDING");
  }
}
