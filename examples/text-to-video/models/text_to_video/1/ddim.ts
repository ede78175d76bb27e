// The denoising loop's schedule and update (DDIM, eta = 0), shared by the pipeline's model and
// any client that drives the denoiser step by step (bench/text-to-video.ts does).

/** Training steps of the noise schedule. */
export const TRAIN_STEPS = 1000;

/** Stable Diffusion's "scaled linear" schedule: alpha-bar for each of the 1000 training steps. */
export const ALPHA_BAR: Float64Array = (() => {
  const out = new Float64Array(TRAIN_STEPS);
  let product = 1;
  for (let i = 0; i < TRAIN_STEPS; i++) {
    const beta = (Math.sqrt(0.00085) + (i / (TRAIN_STEPS - 1)) * (Math.sqrt(0.012) - Math.sqrt(0.00085))) ** 2;
    product *= 1 - beta;
    out[i] = product;
  }
  return out;
})();

/** Step `step` of `steps`: its training timestep and the one it steps to (-1 after the last). */
export function timesteps(step: number, steps: number): { t: number; prev: number } {
  const t = Math.floor(((steps - 1 - step) * TRAIN_STEPS) / steps);
  const prev = step + 1 < steps ? Math.floor(((steps - 2 - step) * TRAIN_STEPS) / steps) : -1;
  return { t, prev };
}

/** alpha-bar at timestep `t` and at `prev` (1 after the last step): what a DDIM update needs of the schedule. */
export function alphas(t: number, prev: number): [number, number] {
  return [ALPHA_BAR[t] as number, prev >= 0 ? (ALPHA_BAR[prev] as number) : 1];
}

/**
 * One DDIM update from the denoiser's noise prediction `eps` at timestep `t`: the predicted clean
 * latent `x0` (clamped to ±1.5) and the latent at `prev`. (The same update as a model, for
 * latents kept on a GPU: scripts/real/pipeline.py's `DdimUpdate`, models-real's `ddim`.)
 */
export function ddimStep(
  latent: Float32Array,
  eps: Float32Array,
  t: number,
  prev: number,
): { next: Float32Array<ArrayBuffer>; x0: Float32Array<ArrayBuffer> } {
  const [a, aPrev] = alphas(t, prev);
  const [noiseScale, signal] = [Math.sqrt(1 - a), Math.sqrt(a)];
  const [keep, renoise] = [Math.sqrt(aPrev), Math.sqrt(1 - aPrev)];
  const next = new Float32Array(latent.length);
  const x0 = new Float32Array(latent.length);
  for (let i = 0; i < latent.length; i++) {
    const e = eps[i] ?? 0;
    const clean = Math.min(1.5, Math.max(-1.5, ((latent[i] ?? 0) - noiseScale * e) / signal));
    x0[i] = clean;
    next[i] = keep * clean + renoise * e;
  }
  return { next, x0 };
}
