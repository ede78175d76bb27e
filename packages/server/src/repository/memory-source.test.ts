import { describe, expect, it } from "vitest";
import type { BackendModel } from "../backend/backend.js";
import { bytesOf, describeMemory, hostMemorySource, measureWith, residentBytes } from "./memory-source.js";

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
