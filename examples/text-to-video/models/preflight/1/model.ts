// preflight: the pipeline's pre-check. Refuses a request the pipeline cannot make with a message
// that says what is allowed, before any model runs; marks prompts with a blocked term.
import type { InitializeArgs, Model, Request, Response } from "@galley/server/model";

interface Limits {
  resolutions: Map<string, [number, number]>;
  defaultResolution: string;
  maxFrames: number;
  maxSteps: number;
  maxPromptBytes: number;
  blocked: string[];
}

function invalid(message: string): Error {
  return Object.assign(new Error(message), { code: "INVALID_ARG" });
}

export default class Preflight implements Model {
  #limits!: Limits;

  initialize(args: InitializeArgs): void {
    const config = JSON.parse(args.model_config) as { parameters: Record<string, { string_value: string }> };
    const parameter = (key: string) => config.parameters[key]?.string_value ?? "";
    const resolutions = new Map<string, [number, number]>();
    for (const text of parameter("supported_resolutions").split(",")) {
      const [h, w] = text.split("x").map(Number);
      resolutions.set(text, [h ?? 0, w ?? 0]);
    }
    this.#limits = {
      resolutions,
      defaultResolution: parameter("default_resolution"),
      maxFrames: Number(parameter("max_frames")),
      maxSteps: Number(parameter("max_steps")),
      maxPromptBytes: Number(parameter("max_prompt_bytes")),
      blocked: parameter("blocked_terms")
        .split(",")
        .map((t) => t.trim().toLowerCase())
        .filter((t) => t !== ""),
    };
  }

  execute(requests: readonly Request[]): Response[] {
    return requests.map((request) => {
      try {
        return this.#check(request);
      } catch (error) {
        return { error: error as Error };
      }
    });
  }

  #check(request: Request): Response {
    const limits = this.#limits;
    const prompt = request.input("PROMPT")?.strings()[0] ?? "";
    if (prompt.trim() === "") throw invalid("the prompt is empty: describe the video to make");
    const bytes = new TextEncoder().encode(prompt).length;
    if (bytes > limits.maxPromptBytes)
      throw invalid(`the prompt is ${bytes} bytes long; at most ${limits.maxPromptBytes} are allowed`);
    const resolution = request.input("RESOLUTION")?.strings()[0] || limits.defaultResolution;
    const size = limits.resolutions.get(resolution);
    if (!size)
      throw invalid(
        `resolution '${resolution}' is not supported; use one of ${[...limits.resolutions.keys()].join(", ")}`,
      );
    const frames = (request.input("FRAMES")?.typed()[0] as number | undefined) ?? 16;
    if (!Number.isInteger(frames) || frames < 1 || frames > limits.maxFrames)
      throw invalid(`frames must be between 1 and ${limits.maxFrames}, not ${frames}`);
    const steps = (request.input("STEPS")?.typed()[0] as number | undefined) ?? 20;
    if (!Number.isInteger(steps) || steps < 1 || steps > limits.maxSteps)
      throw invalid(`steps must be between 1 and ${limits.maxSteps}, not ${steps}`);
    const lower = prompt.toLowerCase();
    const blocked = limits.blocked.some((term) => lower.includes(term));
    // Keyframes are generated, the rest interpolated: about every second frame is a keyframe.
    const keyframes = frames === 1 ? 1 : Math.max(2, Math.ceil(frames / 2));
    const int = (name: string, value: number) => ({
      name,
      datatype: "INT32" as const,
      shape: [1],
      data: Int32Array.of(value),
    });
    return {
      outputs: [
        int("HEIGHT", size[0]),
        int("WIDTH", size[1]),
        int("FRAMES", frames),
        int("KEYFRAMES", keyframes),
        int("STEPS", steps),
        { name: "BLOCKED", datatype: "BOOL", shape: [1], data: Uint8Array.of(blocked ? 1 : 0) },
      ],
    };
  }
}
