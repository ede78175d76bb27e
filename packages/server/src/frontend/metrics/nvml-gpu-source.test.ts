import { existsSync } from "node:fs";
import type { GpuReadings } from "@galley/backends-native";
import { describe, expect, it } from "vitest";
import { cudaVisibleGpus, nvmlGpuSource } from "./nvml-gpu-source.js";

const gpu = (index: number, uuid: string): GpuReadings => ({ index, uuid, name: "", errors: {} });
const GPUS = [gpu(0, "GPU-aaaa1111-0000"), gpu(1, "GPU-bbbb2222-0000"), gpu(2, "GPU-cccc3333-0000")];
const indexes = (spec: string | undefined) => cudaVisibleGpus(GPUS, spec).map((g) => g.index);

describe("cudaVisibleGpus (CUDA_VISIBLE_DEVICES)", () => {
  it("keeps every GPU when unset, none when empty", () => {
    expect(indexes(undefined)).toEqual([0, 1, 2]);
    expect(indexes("")).toEqual([]);
  });

  it("reads indexes and GPU- uuid prefixes, in the order given, once each", () => {
    expect(indexes("2,0")).toEqual([2, 0]);
    expect(indexes(" 1 , GPU-cccc ")).toEqual([1, 2]);
    expect(indexes("0,0")).toEqual([0]);
  });

  it("stops at the first entry that names no GPU, as CUDA does", () => {
    expect(indexes("1,7,0")).toEqual([1]);
    expect(indexes("-1,0")).toEqual([]);
    expect(indexes("MIG-abcd,0")).toEqual([]);
  });
});

describe("nvmlGpuSource", () => {
  it.skipIf(existsSync("/dev/nvidiactl"))("answers unavailable with the reason where there is no NVML", async () => {
    const sample = await nvmlGpuSource({}).sample();
    expect(sample.available).toBe(false);
    if (!sample.available) expect(sample.reason).not.toBe("");
  });
});
