import { describe, expect, it } from "vitest";
import { cudaVisibleDevices } from "./cuda-visible-devices.js";

// NVML's view of a machine of three GPUs (index order); the CUDA ordinal is the position returned.
const GPUS = [
  { index: 0, uuid: "GPU-aaaa1111-0000" },
  { index: 1, uuid: "GPU-bbbb2222-0000" },
  { index: 2, uuid: "GPU-cccc3333-0000" },
];
const indexes = (spec: string | undefined) => cudaVisibleDevices(GPUS, spec).map((g) => g.index);

describe("cudaVisibleDevices (CUDA_VISIBLE_DEVICES)", () => {
  it("keeps every GPU when unset, none when empty", () => {
    expect(indexes(undefined)).toEqual([0, 1, 2]);
    expect(indexes("")).toEqual([]);
  });

  it("numbers the GPUs it names from 0 in the order given: CUDA_VISIBLE_DEVICES=2,0 makes NVML's 2 CUDA's 0", () => {
    expect(indexes("2,0")).toEqual([2, 0]);
    expect(indexes("1")).toEqual([1]);
    expect(indexes(" 1 , GPU-cccc ")).toEqual([1, 2]);
    expect(indexes("bbbb2222,0")).toEqual([1, 0]);
    expect(indexes("0,0")).toEqual([0]);
  });

  it("stops at the first entry that names no GPU, as CUDA does", () => {
    expect(indexes("1,7,0")).toEqual([1]);
    expect(indexes("-1,0")).toEqual([]);
    expect(indexes("MIG-abcd,0")).toEqual([]);
    expect(indexes("GPU-ffff,0")).toEqual([]);
    expect(indexes(",0")).toEqual([]);
  });
});
