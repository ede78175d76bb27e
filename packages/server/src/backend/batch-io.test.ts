import { fromModelConfigJson } from "@galley/config";
import { describe, expect, it } from "vitest";
import { configOutputShape } from "./batch-io.js";

const output = (reshape: number[] | undefined, dims: number[]) =>
  fromModelConfigJson({
    name: "m",
    output: [{ name: "OUT", data_type: "TYPE_FP32", dims, ...(reshape ? { reshape: { shape: reshape } } : {}) }],
  }).output[0];

describe("configOutputShape", () => {
  it("keeps the model's shape for an output without reshape", () => {
    expect(configOutputShape([4, 6], output(undefined, [6]), true)).toEqual([4, 6]);
    expect(configOutputShape([4, 6], undefined, true)).toEqual([4, 6]);
  });

  it("gives the config's dims after the batch dimension, a -1 taking the elements left", () => {
    expect(configOutputShape([4, 6], output([6], [2, 3]), true)).toEqual([4, 2, 3]);
    expect(configOutputShape([4, 6], output([6], [-1, 3]), true)).toEqual([4, 2, 3]);
    expect(configOutputShape([2, 12], output([24], [4, -1]), false)).toEqual([4, 6]);
  });
});
