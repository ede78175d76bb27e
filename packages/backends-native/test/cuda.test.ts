import { existsSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { probeCuda } from "../src/index.js";

describe("probeCuda", () => {
  it("agrees with the machine: available exactly when an NVIDIA device node exists", async () => {
    const cuda = await probeCuda();
    const gpuMachine = existsSync("/dev/nvidiactl") && existsSync("/dev/nvidia0");
    expect(cuda.available).toBe(gpuMachine);
    if (cuda.available) {
      expect(cuda.driverVersion).toBeGreaterThanOrEqual(11000);
      expect(cuda.deviceCount).toBeGreaterThanOrEqual(1);
      expect(cuda.error).toBe("");
      // One row per GPU, each GPU its own peer.
      expect(cuda.peerAccess).toHaveLength(cuda.deviceCount);
      cuda.peerAccess.forEach((row, a) => {
        expect(row).toHaveLength(cuda.deviceCount);
        expect(row[a]).toBe(true);
      });
    } else {
      expect(cuda.error).not.toBe("");
      expect(cuda.peerAccess).toEqual([]);
    }
  });

  it("answers concurrent probes consistently (each runs on the libuv thread pool)", async () => {
    const [a, b] = await Promise.all([probeCuda(), probeCuda()]);
    expect(a).toEqual(b);
  });
});
