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

/** Real frames ([count, h, w, 3] RGB bytes) through super-resolution (4x) and interpolation to `frameCount` frames. */
export async function upscaleVideo(
  client: GrpcClient,
  input: Video,
  frameCount: number,
  signal?: AbortSignal,
): Promise<Video> {
  const { count, height, width, rgb } = input;
  const plane = height * width;
  const planar = new Float32Array(count * 3 * plane);
  for (let f = 0; f < count; f++)
    for (let p = 0; p < plane; p++)
      for (let c = 0; c < 3; c++) planar[(f * 3 + c) * plane + p] = (rgb[(f * plane + p) * 3 + c] ?? 0) / 255;
  const result = await client.infer("upscale_video", {
    inputs: {
      FRAMES: tensor.fp32([count, 3, height, width], planar),
      FRAME_COUNT: tensor.int32([1], [frameCount]),
    },
    ...(signal ? { signal } : {}),
  });
  return video(result.output("VIDEO"));
}
