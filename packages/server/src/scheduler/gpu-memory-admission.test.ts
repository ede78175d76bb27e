// GPU-memory admission driven by a GPU table the test writes (the NVML reader is exercised on a
// GPU by packages/backends-native/test/gpu/memory-gpu.mjs).
import { describe, expect, it } from "vitest";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";
import { createLogger } from "../base/log.js";
import { BatchMemory } from "./batch-memory.js";
import { GpuMemoryAdmission } from "./gpu-memory-admission.js";

const MIB = 2 ** 20;

/** GPUs whose free memory the test sets; counts reads and cache releases. */
class TableReader implements DeviceMemoryReader {
  readonly gpus = new Map<number, DeviceMemoryReading>();
  reads = 0;
  releases = 0;
  /** What a cache release frees (added to free memory). */
  cached = 0;
  set(device: number, freeMib: number, cachedMib = 0): void {
    this.gpus.set(device, {
      freeBytes: freeMib * MIB,
      usedBytes: 0,
      totalBytes: 80_000 * MIB,
      cachedBytes: cachedMib * MIB,
    });
  }
  async read(): Promise<ReadonlyMap<number, DeviceMemoryReading>> {
    this.reads++;
    return new Map(this.gpus);
  }
  async releaseCache(): Promise<void> {
    this.releases++;
  }
}

function setup(reserveMib = 100) {
  const reader = new TableReader();
  const log = createLogger({ write: () => {} });
  const gate = new GpuMemoryAdmission({ reader, reserveBytes: reserveMib * MIB, waitMs: 1000, log });
  return { reader, gate };
}

describe("BatchMemory", () => {
  it("keeps each size's largest peak and estimates other sizes from the largest bytes per sample", () => {
    const memory = new BatchMemory();
    expect(memory.estimate(4)).toBeUndefined();
    memory.record(2, 200);
    memory.record(2, 100);
    memory.record(4, 300);
    expect(memory.estimate(2)).toBe(200);
    expect(memory.estimate(4)).toBe(300);
    // 100 bytes a sample (size 2) is the largest: 8 → 800.
    expect(memory.estimate(8)).toBe(800);
    memory.record(0, 5);
    memory.record(3, Number.NaN);
    expect([...memory.peaks.keys()]).toEqual([2, 4]);
  });
});

describe("GpuMemoryAdmission", () => {
  it("admits nothing before the first reading, then the largest size whose estimate fits free memory less the reserve", async () => {
    const { reader, gate } = setup();
    reader.set(0, 1100);
    const memory = new BatchMemory();
    memory.record(1, 300 * MIB);
    expect(gate.admit(0, memory, [1, 2, 3, 4])).toBeUndefined();
    await gate.refresh();
    // 1100 - 100 reserve = 1000: three samples of 300 fit, four do not.
    const batch = gate.admit(0, memory, [1, 2, 3, 4]);
    expect(batch?.size).toBe(3);
    expect(gate.room(0)).toBe(100 * MIB);
    // What the admitted batch may take is held until it ends: one more sample does not fit.
    expect(gate.admit(0, memory, [1])).toBeUndefined();
    expect(gate.refused).toBe(1);
    batch?.release();
    batch?.release();
    await gate.refresh();
    expect(gate.room(0)).toBe(1000 * MIB);
  });

  it("counts the allocator's cache as room, and releases it once when nothing fits", async () => {
    const { reader, gate } = setup();
    reader.set(0, 200, 500);
    await gate.refresh();
    const memory = new BatchMemory();
    memory.record(2, 1200 * MIB);
    // 200 + 500 cached - 100 = 600: one sample (600) fits, two (1200) do not.
    expect(gate.admit(0, memory, [1, 2])?.size).toBe(1);
    const none = new BatchMemory();
    none.record(1, 5000 * MIB);
    const heard: number[] = [];
    gate.onRoom(() => heard.push(reader.reads));
    expect(gate.admit(0, none, [1])).toBeUndefined();
    expect(gate.admit(0, none, [1])).toBeUndefined();
    expect(reader.releases).toBe(1);
    // After the release the GPU is read again and the listener told.
    await gate.refresh();
    expect(heard.length).toBeGreaterThan(0);
    gate.close();
  });

  it("a model never measured runs alone on its GPU, at the smallest size", async () => {
    const { reader, gate } = setup();
    reader.set(0, 10_000);
    reader.set(1, 10_000);
    await gate.refresh();
    const unknown = new BatchMemory();
    const first = gate.admit(0, unknown, [1, 4, 8]);
    expect(first?.size).toBe(1);
    expect(gate.admit(0, unknown, [1, 4, 8])).toBeUndefined();
    // Another GPU is another matter.
    expect(gate.admit(1, unknown, [2])?.size).toBe(2);
    first?.release();
    expect(gate.admit(0, unknown, [1, 4, 8])?.size).toBe(1);
    gate.close();
  });

  it("admits everything on a GPU NVML does not show (nothing to judge by)", async () => {
    const { gate } = setup();
    await gate.refresh();
    const memory = new BatchMemory();
    memory.record(1, 10 ** 12);
    expect(gate.admit(3, memory, [1, 2])?.size).toBe(2);
    expect(gate.room(3)).toBeUndefined();
  });

  it("polls while a batch waits: memory another process freed is seen", async () => {
    const { reader, gate } = setup(0);
    reader.set(0, 100);
    await gate.refresh();
    const memory = new BatchMemory();
    memory.record(1, 500 * MIB);
    const freed = new Promise<void>((resolve) => {
      gate.onRoom(() => {
        if (gate.admit(0, memory, [1])) resolve();
      });
    });
    expect(gate.admit(0, memory, [1])).toBeUndefined();
    reader.set(0, 1000);
    await freed;
    gate.close();
  });

  it("a reader that fails: a warning, and with no figures nothing is held back", async () => {
    const warnings: string[] = [];
    const log = createLogger({ write: (line) => warnings.push(line) });
    const reader: DeviceMemoryReader = {
      read: () => Promise.reject(new Error("driver gone")),
      releaseCache: async () => {},
    };
    const gate = new GpuMemoryAdmission({ reader, reserveBytes: 0, waitMs: 10, log });
    await gate.refresh();
    expect(warnings.some((w) => w.includes("reading GPU memory failed: driver gone"))).toBe(true);
    const memory = new BatchMemory();
    memory.record(1, 10 ** 12);
    expect(gate.admit(0, memory, [1, 2])?.size).toBe(2);
  });
});
