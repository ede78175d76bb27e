import { describe, expect, it } from "vitest";
import type { BackendModel } from "../backend/backend.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";
import {
  bytesOf,
  describeMemory,
  gpuMemorySource,
  hostMemorySource,
  measureWith,
  residentBytes,
} from "./memory-source.js";

const model = (pids: number[] = []): BackendModel => ({
  instances: [],
  unload: async () => {},
  processIds: () => pids,
});

describe("hostMemorySource", () => {
  it("is this process' growth across the load, never below 0", async () => {
    let rss = 100;
    const source = hostMemorySource(() => rss);
    const end = await source.begin();
    rss = 1_100;
    expect(await end(model())).toEqual([{ type: "CPU", id: 0, byteSize: 1_000 }]);
    const shrinking = await source.begin();
    rss = 50;
    expect(await shrinking(model())).toEqual([{ type: "CPU", id: 0, byteSize: 0 }]);
  });

  it("adds the resident set of the model's own processes; a process that is gone counts 0", async () => {
    const own = await residentBytes(process.pid);
    expect(own).toBeGreaterThan(0);
    expect(await residentBytes(2 ** 30)).toBe(0);
    const end = await hostMemorySource(() => 0).begin();
    const [usage] = await end(model([process.pid, 2 ** 30]));
    expect(usage?.byteSize).toBeGreaterThan(0);
  });
});

describe("measureWith and the helpers", () => {
  it("joins the sources' usages; bytesOf sums one kind; describeMemory writes them host first", async () => {
    const gpu = { begin: async () => async () => [{ type: "GPU" as const, id: 1, byteSize: 3 * 2 ** 20 }] };
    const end = await measureWith([hostMemorySource(() => 0), gpu]).begin();
    const usages = await end(model());
    expect(usages).toEqual([
      { type: "CPU", id: 0, byteSize: 0 },
      { type: "GPU", id: 1, byteSize: 3 * 2 ** 20 },
    ]);
    expect(bytesOf(usages, "GPU", 1)).toBe(3 * 2 ** 20);
    expect(bytesOf(usages, "GPU", 0)).toBe(0);
    expect(describeMemory(usages)).toBe("0.0 MiB host, 3.0 MiB gpu1");
  });
});

/** Readings the test sets, one table per read. */
function reader(...tables: Map<number, DeviceMemoryReading>[]): DeviceMemoryReader {
  return {
    read: async () => tables.shift() ?? new Map(),
    releaseCache: async () => {},
  };
}

const gpu = (used: number, processes?: { pid: number; usedBytes?: number }[]): DeviceMemoryReading => ({
  freeBytes: 1000 - used,
  usedBytes: used,
  totalBytes: 1000,
  ...(processes ? { processes } : {}),
});

describe("gpuMemorySource", () => {
  it("is this process' growth on each GPU plus the model's own processes whole; GPUs it did not grow on are left out", async () => {
    const before = new Map([
      [
        0,
        gpu(300, [
          { pid: 7, usedBytes: 100 },
          { pid: 99, usedBytes: 200 },
        ]),
      ],
      [1, gpu(50, [{ pid: 7, usedBytes: 50 }])],
    ]);
    const after = new Map([
      [
        0,
        gpu(700, [
          { pid: 7, usedBytes: 350 },
          { pid: 99, usedBytes: 200 },
          { pid: 42, usedBytes: 150 },
        ]),
      ],
      [1, gpu(50, [{ pid: 7, usedBytes: 50 }])],
    ]);
    const end = await gpuMemorySource(reader(before, after), 7).begin();
    // 250 grown in process 7, and the stub (42) whole; 99 is someone else's.
    expect(await end(model([42]))).toEqual([{ type: "GPU", id: 0, byteSize: 400 }]);
  });

  it("where NVML does not list this process (another PID namespace), the GPU's used growth stands in", async () => {
    const end = await gpuMemorySource(reader(new Map([[0, gpu(100, [])]]), new Map([[0, gpu(350, [])]])), 7).begin();
    expect(await end(model())).toEqual([{ type: "GPU", id: 0, byteSize: 250 }]);
  });

  it("without NVML (no GPUs read) there are no GPU figures", async () => {
    const end = await gpuMemorySource(reader(new Map(), new Map())).begin();
    expect(await end(model())).toEqual([]);
  });
});
