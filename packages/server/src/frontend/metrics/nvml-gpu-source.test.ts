import { existsSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { nvmlGpuSource } from "./nvml-gpu-source.js";

describe("nvmlGpuSource", () => {
  it.skipIf(existsSync("/dev/nvidiactl"))("answers unavailable with the reason where there is no NVML", async () => {
    const sample = await nvmlGpuSource({}).sample();
    expect(sample.available).toBe(false);
    if (!sample.available) expect(sample.reason).not.toBe("");
  });
});
