// Talking to the pipeline: text_to_video (streamed, with progress and previews) and upscale_video
// (real frames through super-resolution and interpolation).
import { type GrpcClient, tensor } from "@galley/client";

/** Frames as interleaved RGB bytes, [count, height, width, 3]. */
export interface Video {
  count: number;
  height: number;
  width: number;
  rgb: Uint8Array;
}

export interface GenerateOptions {
  prompt: string;
  /** Frames in the output (default 16). */
  frames?: number;
  /** Denoising steps (default 20). */
  steps?: number;
  /** "HEIGHTxWIDTH", one of the server's supported resolutions (default 128x128). */
  resolution?: string;
  seed?: number;
  /** Send a preview frame every this many steps (0: none). */
  previewEvery?: number;
  /**
   * Progress at most this often, in ms (default 0: every step). Each progress response costs CPU
   * (server and client: ~1.7 ms on a 2-core VM); a progress bar needs ~10 a second.
   */
  progressIntervalMs?: number;
  /** Aborting cancels the request on the server: the denoising loop stops. */
  signal?: AbortSignal;
  /**
   * Triton's request `priority`, which the pipeline's denoising calls carry: with the example's
   * denoiser, 1 (interactive) is served before the default 2, and 2 before 3, at every step.
   */
  priority?: number;
}

export interface Progress {
  /** "denoise", "decode", "done" or "blocked". */
  stage: string;
  step: number;
  total: number;
  /** A preview of the middle keyframe, when one was due at this step. */
  preview?: Video;
}

function video(t: { shape: readonly number[]; uint8(): Uint8Array }): Video {
  const [count = 0, height = 0, width = 0] = t.shape;
  return { count, height, width, rgb: t.uint8() };
}

/** Generate a video from a prompt; `onProgress` sees every step. */
export async function generateVideo(
  client: GrpcClient,
  options: GenerateOptions,
  onProgress: (progress: Progress) => void = () => {},
): Promise<Video & { blocked: boolean }> {
  const inputs: Parameters<GrpcClient["infer"]>[1]["inputs"] = { PROMPT: tensor.bytes([1], [options.prompt]) };
  if (options.resolution !== undefined) inputs.RESOLUTION = tensor.bytes([1], [options.resolution]);
  if (options.frames !== undefined) inputs.FRAMES = tensor.int32([1], [options.frames]);
  if (options.steps !== undefined) inputs.STEPS = tensor.int32([1], [options.steps]);
  if (options.seed !== undefined) inputs.SEED = tensor.int32([1], [options.seed]);
  if (options.previewEvery) inputs.PREVIEW_EVERY = tensor.int32([1], [options.previewEvery]);
  if (options.progressIntervalMs) inputs.PROGRESS_INTERVAL_MS = tensor.int32([1], [options.progressIntervalMs]);
  for await (const response of client.streamInfer("text_to_video", {
    inputs,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.priority !== undefined ? { priority: options.priority } : {}),
  })) {
    const stage = response.output("STAGE").strings()[0] ?? "";
    const [step = 0, total = 0] = response.output("STEP").int32();
    const preview = response.output("PREVIEW");
    onProgress({ stage, step, total, ...(preview.shape[0] ? { preview: video(preview) } : {}) });
    if (stage === "done" || stage === "blocked")
      return { ...video(response.output("VIDEO")), blocked: stage === "blocked" };
  }
  throw new Error("the server ended the stream without a video");
}

/** Where {@link upscaleVideo} is: `done` of `total` frames upscaled, then segments interpolated. */
export interface UpscaleProgress {
  stage: "upscale" | "interpolate";
  done: number;
  total: number;
}

/**
 * Real frames ([count, h, w, 3] RGB bytes) through super-resolution (4x) and interpolation to
 * `frameCount` frames. Without `onProgress`, one call to the upscale_video ensemble. With it, the
 * client runs the ensemble's two steps itself so that it can tell how far they are: super_resolution
 * one frame at a time, then frame_interpolation one pair of neighbouring frames at a time (two at
 * once: the model has two instances) where the output frames fall evenly between each pair (the
 * default, 2n - 1 frames), else in one call. The frames are the same either way: each interpolated
 * frame depends only on the pair around it.
 */
export async function upscaleVideo(
  client: GrpcClient,
  input: Video,
  frameCount: number,
  signal?: AbortSignal,
  onProgress?: (progress: UpscaleProgress) => void,
): Promise<Video> {
  const { count, height, width } = input;
  const planar = toPlanar(input);
  if (!onProgress) {
    const result = await client.infer("upscale_video", {
      inputs: {
        FRAMES: tensor.fp32([count, 3, height, width], planar),
        FRAME_COUNT: tensor.int32([1], [frameCount]),
      },
      ...(signal ? { signal } : {}),
    });
    return video(result.output("VIDEO"));
  }
  const frame = 3 * height * width;
  const segments = count > 1 && (frameCount - 1) % (count - 1) === 0 ? count - 1 : 1;
  const total = count + segments;
  const upscaled: Float32Array[] = [];
  onProgress({ stage: "upscale", done: 0, total });
  for (let f = 0; f < count; f++) {
    const result = await client.infer("super_resolution", {
      inputs: { input: tensor.fp32([1, 3, height, width], planar.slice(f * frame, (f + 1) * frame)) },
      ...(signal ? { signal } : {}),
    });
    upscaled.push(result.output("output").fp32());
    onProgress({ stage: "upscale", done: f + 1, total });
  }
  const [h, w] = [height * 4, width * 4];
  const big = 3 * h * w;
  const perSegment = segments === 1 ? frameCount : (frameCount - 1) / segments + 1;
  const parts: Uint8Array[] = new Array(segments);
  let finished = 0;
  let next = 0;
  const worker = async () => {
    while (next < segments) {
      const s = next++;
      const from = segments === 1 ? 0 : s;
      const frames = segments === 1 ? count : 2;
      const joined = new Float32Array(frames * big);
      for (let i = 0; i < frames; i++) joined.set(upscaled[from + i] as Float32Array, i * big);
      const result = await client.infer("frame_interpolation", {
        inputs: {
          FRAMES: tensor.fp32([frames, 3, h, w], joined),
          FRAME_COUNT: tensor.int32([1], [perSegment]),
        },
        ...(signal ? { signal } : {}),
      });
      parts[s] = result.output("VIDEO").uint8();
      finished += 1;
      onProgress({ stage: "interpolate", done: count + finished, total });
    }
  };
  await Promise.all([worker(), worker()]);
  // Each segment after the first starts with the frame the one before it ended on.
  const rgb = new Uint8Array(frameCount * h * w * 3);
  let at = 0;
  for (const [s, part] of parts.entries()) {
    const skip = s === 0 ? 0 : h * w * 3;
    rgb.set(part.subarray(skip), at);
    at += part.length - skip;
  }
  return { count: frameCount, height: h, width: w, rgb };
}

/** [count, h, w, 3] RGB bytes as [count, 3, h, w] floats in [0, 1]. */
function toPlanar({ count, height, width, rgb }: Video): Float32Array {
  const plane = height * width;
  const planar = new Float32Array(count * 3 * plane);
  for (let f = 0; f < count; f++)
    for (let p = 0; p < plane; p++)
      for (let c = 0; c < 3; c++) planar[(f * 3 + c) * plane + p] = (rgb[(f * plane + p) * 3 + c] ?? 0) / 255;
  return planar;
}
