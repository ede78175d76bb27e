import { readFile } from "node:fs/promises";
import type { BackendModel } from "../backend/backend.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";

/**
 * Memory one model version holds, in the statistics extension's terms (`memory_usage`): `CPU` is
 * host memory, `GPU` device memory of GPU `id`.
 */
export interface MemoryUsage {
  type: "CPU" | "GPU";
  /** 0 for host memory; the CUDA ordinal for a GPU. */
  id: number;
  byteSize: number;
}

/**
 * Where a model version's memory figures come from. A source takes a reading before the version
 * loads; what it returns, called after the load and warmup with the loaded model, says what the
 * load took. Host RSS is Galley's ({@link hostMemorySource}); a GPU source (NVML per process, the
 * PyTorch allocator's statistics) plugs in beside it.
 */
export interface MemorySource {
  begin(): Promise<(model: BackendModel) => Promise<MemoryUsage[]>>;
}

/**
 * Host memory: this process' resident set grown across the load (never below 0), plus the resident
 * set of every process the model's instances run in besides this one (a Python model's stubs,
 * `BackendModel.processIds`). Loads that overlap share one process, so each one's growth is only
 * approximately its own; with a memory budget, loads run one at a time.
 */
export function hostMemorySource(rss: () => number = () => process.memoryUsage().rss): MemorySource {
  return {
    async begin() {
      const before = rss();
      return async (model) => {
        const grown = Math.max(0, rss() - before);
        const others = await Promise.all((model.processIds?.() ?? []).map(residentBytes));
        return [{ type: "CPU", id: 0, byteSize: others.reduce((sum, n) => sum + n, grown) }];
      };
    },
  };
}

/**
 * GPU memory, per GPU, through NVML: this process' memory on the GPU grown across the load (never
 * below 0), plus all the memory the model's own processes (a Python model's stubs,
 * `BackendModel.processIds`) hold there. Where NVML does not list this process (its PID is another
 * namespace's, as in some containers), the GPU's used memory grown across the load stands in.
 * Memory the PyTorch allocator keeps cached counts: it is the process'. GPUs the load did not grow
 * on are left out; without NVML there are no GPU figures.
 */
export function gpuMemorySource(reader: DeviceMemoryReader, pid: number = process.pid): MemorySource {
  return {
    async begin() {
      const before = await reader.read();
      return async (model) => {
        const after = await reader.read();
        const others = new Set(model.processIds?.() ?? []);
        const usages: MemoryUsage[] = [];
        for (const [id, now] of [...after].sort(([a], [b]) => a - b)) {
          const was = before.get(id);
          if (!was) continue;
          const own = processBytes(now, pid);
          const grown = own !== undefined ? own - (processBytes(was, pid) ?? 0) : now.usedBytes - was.usedBytes;
          let bytes = Math.max(0, grown);
          for (const p of now.processes ?? []) if (others.has(p.pid)) bytes += p.usedBytes ?? 0;
          if (bytes > 0) usages.push({ type: "GPU", id, byteSize: bytes });
        }
        return usages;
      };
    },
  };
}

/** What NVML says `pid` holds on a GPU; undefined where it does not list it (or cannot say). */
function processBytes(reading: DeviceMemoryReading, pid: number): number | undefined {
  const found = reading.processes?.find((p) => p.pid === pid);
  return found?.usedBytes;
}

/** Measure with every source: one reading before, one after; the usages of all of them. */
export function measureWith(sources: readonly MemorySource[]): MemorySource {
  return {
    async begin() {
      const ends = await Promise.all(sources.map((s) => s.begin()));
      return async (model) => (await Promise.all(ends.map((end) => end(model)))).flat();
    },
  };
}

/** A process' resident set (`VmRSS` in /proc/<pid>/status), 0 when it cannot be read (gone, no /proc). */
export async function residentBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(status)?.[1];
  return kb === undefined ? 0 : Number(kb) * 1024;
}

/** Bytes of `usages` of one kind (`CPU`, or `GPU` on one device). */
export function bytesOf(usages: readonly MemoryUsage[], type: MemoryUsage["type"], id = 0): number {
  return usages.reduce((sum, u) => (u.type === type && u.id === id ? sum + u.byteSize : sum), 0);
}

/** `12.0 MiB host, 300.5 MiB gpu0`: usages for a log line (host first, then GPUs by id). */
export function describeMemory(usages: readonly MemoryUsage[]): string {
  const host = `${(bytesOf(usages, "CPU") / 2 ** 20).toFixed(1)} MiB host`;
  const gpus = [...new Set(usages.filter((u) => u.type === "GPU").map((u) => u.id))]
    .sort((a, b) => a - b)
    .map((id) => `${(bytesOf(usages, "GPU", id) / 2 ** 20).toFixed(1)} MiB gpu${id}`);
  return [host, ...gpus].join(", ");
}
