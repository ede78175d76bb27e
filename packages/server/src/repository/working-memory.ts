import { readFile, writeFile } from "node:fs/promises";
import type { BackendInstance } from "../backend/backend.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";

/** What one warmup sample took on an instance beyond what was held before it (bytes); absent where it cannot be measured. */
export interface SampleMemory {
  host?: number;
  gpu?: number;
}

/**
 * Measures the working memory of warmup samples, for backends that do not report it themselves
 * (Python stubs, ONNX Runtime). Host: the peak resident set of the process the instance runs in
 * (its stub's, or this server's for an in-process backend) during the sample, less its resident set
 * before: the kernel's peak (`VmHWM`) is reset first (`/proc/<pid>/clear_refs` ← `5`). GPU, for an
 * instance in a process of its own: what NVML says that process holds on the GPUs after the
 * sample, less what it held before its first sample (its allocator keeps its peak cached, so this
 * is the most any sample so far took).
 */
export interface WorkingMemoryProbe {
  /** Call just before a sample runs on `instance`; call what it returns once the sample ran. Never rejects. */
  begin(instance: BackendInstance): Promise<() => Promise<SampleMemory>>;
}

/**
 * A probe for one version's warmup. `reader` gives NVML's per-process figures (none without it);
 * `self` is this server's process id.
 */
export function workingMemoryProbe(reader?: DeviceMemoryReader, self: number = process.pid): WorkingMemoryProbe {
  /** What each instance's process held on the GPUs before its first sample. */
  const gpuBaseline = new Map<number, number>();
  return {
    async begin(instance) {
      const other = instance.pid !== undefined && instance.pid !== self ? instance.pid : undefined;
      const pid = other ?? self;
      const reset = await resetPeak(pid);
      const before = reset ? (await processMemory(pid))?.rss : undefined;
      if (other !== undefined && reader && !gpuBaseline.has(other)) {
        const readings = await reader.read();
        // Not yet listed where NVML lists processes: it holds nothing on a GPU yet.
        const held = processGpuBytes(readings, other) ?? (listsProcesses(readings) ? 0 : undefined);
        if (held !== undefined) gpuBaseline.set(other, held);
      }
      return async () => {
        const out: SampleMemory = {};
        const peak = before === undefined ? undefined : (await processMemory(pid))?.peak;
        if (before !== undefined && peak !== undefined) out.host = Math.max(0, peak - before);
        const baseline = other === undefined ? undefined : gpuBaseline.get(other);
        if (other !== undefined && reader && baseline !== undefined) {
          const now = processGpuBytes(await reader.read(), other);
          if (now !== undefined) out.gpu = Math.max(0, now - baseline);
        }
        return out;
      };
    },
  };
}

/** Reset the kernel's peak resident set of `pid` to its resident set now; false where that is not allowed or not Linux. */
async function resetPeak(pid: number): Promise<boolean> {
  return writeFile(`/proc/${pid}/clear_refs`, "5").then(
    () => true,
    () => false,
  );
}

/** `VmRSS` and `VmHWM` of `pid` (bytes); undefined when /proc cannot say (gone, not Linux). */
export async function processMemory(pid: number): Promise<{ rss: number; peak: number } | undefined> {
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const rss = /^VmRSS:\s+(\d+) kB/m.exec(status)?.[1];
  const peak = /^VmHWM:\s+(\d+) kB/m.exec(status)?.[1];
  return rss === undefined || peak === undefined ? undefined : { rss: Number(rss) * 1024, peak: Number(peak) * 1024 };
}

/** Whether NVML lists the compute processes of some GPU. */
function listsProcesses(readings: ReadonlyMap<number, DeviceMemoryReading>): boolean {
  for (const reading of readings.values()) if (reading.processes) return true;
  return false;
}

/** What NVML says `pid` holds on all GPUs together; undefined where it is listed on none. */
function processGpuBytes(readings: ReadonlyMap<number, DeviceMemoryReading>, pid: number): number | undefined {
  let total: number | undefined;
  for (const reading of readings.values()) {
    const found = reading.processes?.find((p) => p.pid === pid);
    if (found?.usedBytes !== undefined) total = (total ?? 0) + found.usedBytes;
  }
  return total;
}
