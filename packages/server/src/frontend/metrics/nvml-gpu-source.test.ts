import { existsSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { nvmlGpuSource } from "./nvml-gpu-source.js";

describe("nvmlGpuSource", () => {
  it("is available exactly where the NVIDIA driver is (/dev/nvidiactl), and says why where it is not", async () => {
    const sample = await nvmlGpuSource({}).sample();
    expect(sample.available).toBe(existsSync("/dev/nvidiactl"));
    if (!sample.available) expect(sample.reason).not.toBe("");
    else expect(sample.gpus.length).toBeGreaterThan(0);
  });
});
