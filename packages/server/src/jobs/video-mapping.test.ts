import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInputSchema, ModelOutputSchema, ModelParameterSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { InferenceError } from "../base/errors.js";
import { jobInputs, videoMapping } from "./video-mapping.js";

function config(parameters: Record<string, string>) {
  return create(ModelConfigSchema, {
    name: "pipe",
    input: ["PROMPT", "SIZE", "N", "STEPS", "EVERY"].map((name) =>
      create(ModelInputSchema, {
        name,
        dataType: name === "PROMPT" || name === "SIZE" ? DataType.TYPE_STRING : DataType.TYPE_INT32,
        dims: [1n],
      }),
    ),
    output: ["VIDEO", "STEP"].map((name) =>
      create(ModelOutputSchema, { name, dataType: DataType.TYPE_UINT8, dims: [-1n] }),
    ),
    parameters: Object.fromEntries(
      Object.entries(parameters).map(([k, v]) => [`videos_api.${k}`, create(ModelParameterSchema, { stringValue: v })]),
    ),
  });
}

describe("videoMapping", () => {
  it("is undefined for a model that does not declare a prompt input", () => {
    expect(videoMapping(config({}))).toBeUndefined();
  });

  it("reads the declared inputs, limits and outputs, and builds a job's inputs from them", () => {
    const mapping = videoMapping(
      config({
        prompt_input: "PROMPT",
        size_input: "SIZE",
        size_order: "HxW",
        sizes: "64x32, 128x64",
        frames_input: "N",
        steps_input: "STEPS",
        fixed_inputs: "EVERY=5",
        max_frames: "8",
        video_output: "VIDEO",
        progress_output: "STEP",
        priorities: "high=1,low=3",
      }),
    );
    expect(mapping).toMatchObject({
      sizes: ["64x32", "128x64"],
      defaultSize: "64x32",
      maxFrames: 8,
      defaultFrames: 16,
      priorities: { high: 1, normal: 0, low: 3 },
    });
    const inputs = jobInputs(mapping as NonNullable<typeof mapping>, {
      model: "pipe",
      prompt: "héllo",
      size: "128x64",
      frames: 4,
      steps: 0,
      priority: "normal",
    });
    expect(inputs.map((t) => [t.name, t.datatype, t.shape])).toEqual([
      ["PROMPT", "BYTES", [1]],
      ["SIZE", "BYTES", [1]],
      ["N", "INT32", [1]],
      ["STEPS", "INT32", [1]],
      ["EVERY", "INT32", [1]],
    ]);
    expect(
      Buffer.from(inputs[0]?.data ?? [])
        .subarray(4)
        .toString(),
    ).toBe("héllo");
    expect(
      Buffer.from(inputs[1]?.data ?? [])
        .subarray(4)
        .toString(),
    ).toBe("64x128");
    expect(new Int32Array(new Uint8Array(inputs[3]?.data ?? []).buffer)[0]).toBe(20);
  });

  it("says which parameter is wrong", () => {
    const base = { prompt_input: "PROMPT", video_output: "VIDEO" };
    const cases: [Record<string, string>, RegExp][] = [
      [{ prompt_input: "PROMPT" }, /video_output is required/],
      [{ ...base, prompt_input: "NOPE" }, /prompt_input names 'NOPE', which is not an input/],
      [{ ...base, video_output: "PROMPT" }, /video_output names 'PROMPT', which is not an output/],
      [{ ...base, max_frames: "0" }, /max_frames must be a whole number >= 1/],
      [{ ...base, max_steps: "ten" }, /max_steps/],
      [{ ...base, sizes: "64" }, /sizes has '64'/],
      [{ ...base, size_order: "WH" }, /size_order/],
      [{ ...base, fixed_inputs: "EVERY" }, /fixed_inputs/],
      [{ ...base, fixed_inputs: "NOPE=1" }, /fixed_inputs/],
      [{ ...base, priorities: "urgent=1" }, /priorities/],
    ];
    for (const [parameters, message] of cases) {
      expect(() => videoMapping(config(parameters))).toThrow(InferenceError);
      expect(() => videoMapping(config(parameters))).toThrow(message);
    }
  });
});
