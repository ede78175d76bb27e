import type { GpuMemory } from "@galley/backends-native";
import { describe, expect, it } from "vitest";
import { cudaOrder, nvmlMemoryReader } from "./gpu-memory.js";

const gpu = (index: number, uuid: string): GpuMemory => ({ index, uuid, freeBytes: 1, usedBytes: 1, totalBytes: 2 });
const gpus = [gpu(0, "GPU-aaaa-1111"), gpu(1, "GPU-bbbb-2222"), gpu(2, "GPU-cccc-3333")];
const order = (visible: string | undefined) => [...cudaOrder(gpus, visible)].map(([ordinal, g]) => [ordinal, g.index]);

describe("cudaOrder", () => {
  it("is NVML's order without CUDA_VISIBLE_DEVICES, and CUDA's with it (indexes or UUID prefixes, up to the first it cannot use)", () => {
    expect(order(undefined)).toEqual([
      [0, 0],
      [1, 1],
      [2, 2],
    ]);
    expect(order("2,0")).toEqual([
      [0, 2],
      [1, 0],
    ]);
    expect(order("GPU-bbbb,cccc-3333")).toEqual([
      [0, 1],
      [1, 2],
    ]);
    expect(order("1,7,0")).toEqual([[0, 1]]);
    expect(order("")).toEqual(order(undefined));
    expect(order("-1")).toEqual([]);
  });
});

describe("nvmlMemoryReader", () => {
  it("reads no GPUs and releases nothing where there is no NVML (this machine), without throwing", async () => {
    const reader = nvmlMemoryReader();
    const readings = await reader.read();
    // On a machine with a GPU and its driver this test says nothing: the GPU script checks that side.
    if (process.env.GALLEY_EXPECT_GPU !== "1") expect(readings.size).toBe(0);
    await expect(reader.releaseCache()).resolves.toBeUndefined();
  });
});
