// How the videos API reaches a decoupled pipeline model: declared in the model's config
// `parameters` under `videos_api.*` (docs/guides/videos-api.md), so any such pipeline can be
// exposed. A model without `videos_api.prompt_input` is not served by the API.
import type { ModelConfig } from "@galley/proto";
import { InferenceError } from "../base/errors.js";
import type { Tensor } from "../base/tensor.js";
import type { JobRequest, PriorityClass } from "./job.js";

/** A model's `videos_api.*` parameters, read and checked. */
export interface VideoMapping {
  promptInput: string;
  /** The input that takes the size, if the model takes one. */
  sizeInput?: string;
  /** The order the size input is written in: `WxH` (OpenAI's) or `HxW`. */
  sizeOrder: "WxH" | "HxW";
  framesInput?: string;
  stepsInput?: string;
  seedInput?: string;
  /** INT32 inputs every job sends with a fixed value (`NAME=1,OTHER=2`). */
  fixedInputs: ReadonlyMap<string, number>;
  /** The sizes allowed (`WxH`); empty: only the default. */
  sizes: readonly string[];
  defaultSize: string;
  maxFrames: number;
  defaultFrames: number;
  maxSteps: number;
  defaultSteps: number;
  maxPromptBytes: number;
  /** Frames per second of the encoded video (and how `seconds` becomes frames). */
  fps: number;
  /** The output carrying `[step, total]` (INT32), for progress. */
  progressOutput?: string;
  /** The output carrying a preview image `[1, h, w, 3]` (UINT8), when there is one. */
  previewOutput?: string;
  /** The output carrying the video `[frames, h, w, 3]` (UINT8). */
  videoOutput: string;
  /** The pipeline's request `priority` for each class (Triton's: 1 highest, 0 the model's default). */
  priorities: Readonly<Record<PriorityClass, number>>;
}

/** A `videos_api.*` parameter that cannot be read: the server's configuration, answered 500 with its text. */
function mappingError(message: string): InferenceError {
  return new InferenceError("UNCLASSIFIED", { message });
}

const PREFIX = "videos_api.";

/** The model's mapping, or undefined when its config does not expose it to the videos API. */
export function videoMapping(config: ModelConfig): VideoMapping | undefined {
  const get = (key: string): string | undefined => {
    const value = config.parameters[PREFIX + key]?.stringValue.trim();
    return value === undefined || value === "" ? undefined : value;
  };
  const promptInput = get("prompt_input");
  if (promptInput === undefined) return undefined;
  const whole = (key: string, fallback: number, min = 1): number => {
    const text = get(key);
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < min) {
      throw mappingError(`${config.name}: ${PREFIX}${key} must be a whole number >= ${min}, not '${text}'`);
    }
    return n;
  };
  const inputNames = new Set(config.input.map((i) => i.name));
  const outputNames = new Set(config.output.map((o) => o.name));
  const input = (key: string): string | undefined => {
    const name = get(key);
    if (name !== undefined && !inputNames.has(name)) {
      throw mappingError(`${config.name}: ${PREFIX}${key} names '${name}', which is not an input`);
    }
    return name;
  };
  const output = (key: string): string | undefined => {
    const name = get(key);
    if (name !== undefined && !outputNames.has(name)) {
      throw mappingError(`${config.name}: ${PREFIX}${key} names '${name}', which is not an output`);
    }
    return name;
  };
  input("prompt_input");
  const videoOutput = output("video_output");
  if (videoOutput === undefined) throw mappingError(`${config.name}: ${PREFIX}video_output is required`);
  const fixedInputs = new Map<string, number>();
  for (const pair of (get("fixed_inputs") ?? "").split(",").filter((p) => p.trim() !== "")) {
    const [name = "", value = ""] = pair.split("=").map((s) => s.trim());
    if (!inputNames.has(name) || !Number.isSafeInteger(Number(value)) || value === "") {
      throw mappingError(`${config.name}: ${PREFIX}fixed_inputs has '${pair}': expected INPUT=integer`);
    }
    fixedInputs.set(name, Number(value));
  }
  const sizes = (get("sizes") ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  for (const size of sizes) {
    if (!/^[1-9][0-9]{0,5}x[1-9][0-9]{0,5}$/.test(size)) {
      throw mappingError(`${config.name}: ${PREFIX}sizes has '${size}': expected WIDTHxHEIGHT`);
    }
  }
  const defaultSize = get("default_size") ?? sizes[0] ?? "";
  const order = get("size_order") ?? "WxH";
  if (order !== "WxH" && order !== "HxW") {
    throw mappingError(`${config.name}: ${PREFIX}size_order must be WxH or HxW, not '${order}'`);
  }
  const priorities: Record<PriorityClass, number> = { high: 0, normal: 0, low: 0 };
  for (const pair of (get("priorities") ?? "").split(",").filter((p) => p.trim() !== "")) {
    const [name = "", value = ""] = pair.split("=").map((s) => s.trim());
    if (!(name in priorities) || !Number.isSafeInteger(Number(value)) || Number(value) < 0 || value === "") {
      throw mappingError(`${config.name}: ${PREFIX}priorities has '${pair}': expected high|normal|low=level`);
    }
    priorities[name as PriorityClass] = Number(value);
  }
  const mapping: VideoMapping = {
    promptInput,
    sizeOrder: order,
    fixedInputs,
    sizes,
    defaultSize,
    maxFrames: whole("max_frames", 16),
    defaultFrames: whole("default_frames", 16),
    maxSteps: whole("max_steps", 50),
    defaultSteps: whole("default_steps", 20),
    maxPromptBytes: whole("max_prompt_bytes", 1000),
    fps: whole("fps", 8),
    videoOutput,
    priorities,
  };
  const optionalNames = {
    sizeInput: input("size_input"),
    framesInput: input("frames_input"),
    stepsInput: input("steps_input"),
    seedInput: input("seed_input"),
    progressOutput: output("progress_output"),
    previewOutput: output("preview_output"),
  };
  for (const [key, value] of Object.entries(optionalNames)) {
    if (value !== undefined) (mapping as unknown as Record<string, string>)[key] = value;
  }
  return mapping;
}

/** A 4-byte-length-prefixed BYTES tensor of one string. */
function bytesTensor(name: string, text: string): Tensor {
  const utf8 = Buffer.from(text, "utf8");
  const data = new Uint8Array(4 + utf8.length);
  new DataView(data.buffer).setUint32(0, utf8.length, true);
  data.set(utf8, 4);
  return { name, datatype: "BYTES", shape: [1], data, parameters: {} };
}

function int32Tensor(name: string, value: number): Tensor {
  return { name, datatype: "INT32", shape: [1], data: new Uint8Array(Int32Array.of(value).buffer), parameters: {} };
}

/** The pipeline's inputs for a job (validated by the API against the same mapping). */
export function jobInputs(mapping: VideoMapping, job: JobRequest): Tensor[] {
  const inputs = [bytesTensor(mapping.promptInput, job.prompt)];
  const size = job.size || mapping.defaultSize;
  if (mapping.sizeInput && size !== "") {
    const [w, h] = size.split("x");
    inputs.push(bytesTensor(mapping.sizeInput, mapping.sizeOrder === "WxH" ? size : `${h}x${w}`));
  }
  if (mapping.framesInput) inputs.push(int32Tensor(mapping.framesInput, job.frames || mapping.defaultFrames));
  if (mapping.stepsInput) inputs.push(int32Tensor(mapping.stepsInput, job.steps || mapping.defaultSteps));
  if (mapping.seedInput && job.seed !== undefined) inputs.push(int32Tensor(mapping.seedInput, job.seed));
  for (const [name, value] of mapping.fixedInputs) inputs.push(int32Tensor(name, value));
  return inputs;
}
