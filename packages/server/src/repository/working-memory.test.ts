// The warm-up working-memory probe on real processes: a python3 child that allocates and frees
// what the test says (an instance in a process of its own, as a Python stub), and this process
// itself (an in-process backend). NVML's per-process list is a table the test writes.
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";
import { processMemory, workingMemoryProbe } from "./working-memory.js";

const MIB = 2 ** 20;
const children: ChildProcessWithoutNullStreams[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) {
    child.kill();
    if (child.exitCode === null && child.signalCode === null) await once(child, "exit");
  }
});

const NOTHING: ExecuteResult = { responses: [], computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n };

/** A python3 process that, for each line `<n>`, touches n MiB, frees them and answers `done`. */
async function allocatingProcess(): Promise<{ pid: number; allocate(mib: number): Promise<void> }> {
  const child = spawn("python3", [
    "-u",
    "-c",
    `import sys
for line in sys.stdin:
    block = bytearray(int(line) * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    del block
    print("done", flush=True)
`,
  ]);
  children.push(child);
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const allocate = async (mib: number) => {
    child.stdin.write(`${mib}\n`);
    const answer = await lines.next();
    if (answer.value !== "done") throw new Error(`the child said ${String(answer.value)}`);
  };
  await allocate(0);
  return { pid: child.pid as number, allocate };
}

function instance(pid: number | undefined, run: () => Promise<void>): BackendInstance {
  return {
    name: "m_0",
    ...(pid !== undefined ? { pid } : {}),
    execute: async () => {
      await run();
      return NOTHING;
    },
  };
}

/** NVML as a table: what each process holds on GPU 0 (a process left out is not listed). */
class ProcessTable implements DeviceMemoryReader {
  readonly held = new Map<number, number>();
  async read(): Promise<ReadonlyMap<number, DeviceMemoryReading>> {
    const processes = [...this.held].map(([pid, usedBytes]) => ({ pid, usedBytes }));
    return new Map([[0, { freeBytes: 0, usedBytes: 0, totalBytes: 0, processes }]]);
  }
  async releaseCache(): Promise<void> {}
}

describe("workingMemoryProbe", () => {
  it("host: each sample's peak resident set in the instance's own process, less what it held before", async () => {
    const child = await allocatingProcess();
    const probe = workingMemoryProbe();
    let mib = 0;
    const stub = instance(child.pid, () => child.allocate(mib));
    const measure = async (size: number) => {
      mib = size;
      const end = await probe.begin(stub);
      await stub.execute([]);
      return (await end()).host ?? -1;
    };
    const big = await measure(96);
    expect(big).toBeGreaterThanOrEqual(95 * MIB);
    expect(big).toBeLessThan(128 * MIB);
    // The 96 MiB were freed: the peak was reset before this sample, so it shows only its own 8 MiB.
    const small = await measure(8);
    expect(small).toBeGreaterThanOrEqual(7 * MIB);
    expect(small).toBeLessThan(40 * MIB);
    expect((await processMemory(child.pid))?.rss).toBeLessThan(64 * MIB);
  });

  it("host, in-process: this server's own peak during the sample", async () => {
    const probe = workingMemoryProbe();
    const end = await probe.begin(instance(undefined, async () => {}));
    const kept = Buffer.alloc(64 * MIB, 1);
    const taken = await end();
    expect(kept.length).toBe(64 * MIB);
    expect(taken.host).toBeGreaterThanOrEqual(63 * MIB);
    expect(taken.gpu).toBeUndefined();
  });

  it("gpu: what the instance's process holds after a sample less what it held before its first (NVML's list)", async () => {
    const child = await allocatingProcess();
    const nvml = new ProcessTable();
    const probe = workingMemoryProbe(nvml);
    const stub = instance(child.pid, () => child.allocate(0));
    // Not listed yet (no CUDA context): it held nothing before its first sample.
    let end = await probe.begin(stub);
    nvml.held.set(child.pid, 300 * MIB);
    expect((await end()).gpu).toBe(300 * MIB);
    // Its allocator keeps the peak: a later sample that needed less still shows the most so far.
    end = await probe.begin(stub);
    nvml.held.set(child.pid, 500 * MIB);
    expect((await end()).gpu).toBe(500 * MIB);
    // Another process' figures are not this instance's; an instance NVML stops listing has none.
    nvml.held.delete(child.pid);
    nvml.held.set(1, 10_000 * MIB);
    end = await probe.begin(stub);
    expect((await end()).gpu).toBeUndefined();
  });

  it("gpu: nothing without NVML's list, nor for an in-process instance (its backend reports its own)", async () => {
    const child = await allocatingProcess();
    const bare: DeviceMemoryReader = { read: async () => new Map(), releaseCache: async () => {} };
    let end = await workingMemoryProbe(bare).begin(instance(child.pid, async () => {}));
    expect((await end()).gpu).toBeUndefined();
    const nvml = new ProcessTable();
    nvml.held.set(process.pid, 100 * MIB);
    end = await workingMemoryProbe(nvml).begin(instance(undefined, async () => {}));
    nvml.held.set(process.pid, 900 * MIB);
    expect((await end()).gpu).toBeUndefined();
  });

  it("a process that is gone has no figures, and nothing throws", async () => {
    const child = await allocatingProcess();
    const probe = workingMemoryProbe(new ProcessTable());
    const stub = instance(child.pid, async () => {});
    const gone = children.pop() as ChildProcessWithoutNullStreams;
    gone.kill("SIGKILL");
    await once(gone, "exit");
    const end = await probe.begin(stub);
    expect(await end()).toEqual({});
  });
});
