// GPU metrics and GPU memory through NVML without a GPU: on this machine the answer is a clean "unavailable"
// with the reason; through a stand-in libnvidia-ml (test/fixtures/fake-nvml.c, built here with cc
// and named by GALLEY_NVML_LIBRARY) the addon's real dlopen path reads two GPUs, one of them
// without power readings, and reports each field's availability on its own. Each fake-library
// case runs in a child process: NVML is loaded once per process.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type GpuMemorySample, type GpuSample, sampleGpuMemory, sampleGpus } from "../src/index.js";

const fixture = fileURLToPath(new URL("fixtures/fake-nvml.c", import.meta.url));
const wrapper = fileURLToPath(new URL("../src/gpu-metrics.ts", import.meta.url));
const memoryWrapper = fileURLToPath(new URL("../src/gpu-memory.ts", import.meta.url));
const compiler = ["/usr/bin/cc", "/usr/bin/gcc"].find((c) => existsSync(c));
let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "galley-fake-nvml-"));
  // A C compiler builds the stand-in (CI's machines have the one node-gyp uses): without one these
  // tests fail here, saying why, rather than skip.
  if (!compiler) throw new Error("the stand-in libnvidia-ml is built with cc: install a C compiler (gcc)");
  for (const [name, defines] of [
    ["libfake-nvml.so", []],
    ["libfake-nvml-incomplete.so", ["-DFAKE_NVML_INCOMPLETE"]],
    ["libfake-nvml-no-processes.so", ["-DFAKE_NVML_NO_PROCESSES"]],
  ] as const) {
    execFileSync(compiler as string, ["-shared", "-fPIC", "-O1", ...defines, "-o", join(dir, name), fixture]);
  }
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** sampleGpus() twice in a fresh Node process with `env`; its answers. */
function sampleInChild(env: Record<string, string>): [GpuSample, GpuSample] {
  const script = `
    const { sampleGpus } = await import(${JSON.stringify(wrapper)});
    const first = await sampleGpus();
    const second = await sampleGpus();
    process.stdout.write(JSON.stringify([first, second]));`;
  const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    env: { ...process.env, ...env },
    encoding: "utf8",
  });
  return JSON.parse(out) as [GpuSample, GpuSample];
}

describe("sampleGpus", () => {
  it("answers without throwing: available on a GPU machine, else false with the reason", async () => {
    const sample = await sampleGpus();
    expect(sample.available).toBe(existsSync("/dev/nvidiactl"));
    if (!sample.available) expect(sample.reason).toMatch(/libnvidia-ml\.so\.1|NVML|Driver/);
  });

  it("a library that is not there: the loader's reason, naming the file", () => {
    const [sample] = sampleInChild({ GALLEY_NVML_LIBRARY: join(dir, "no-such-libnvidia-ml.so") });
    expect(sample).toEqual({ available: false, reason: expect.stringContaining("no-such-libnvidia-ml.so") });
  });

  describe("through a stand-in libnvidia-ml", () => {
    it("reads every GPU, in Triton's units, with per-field availability", () => {
      const [first, second] = sampleInChild({ GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml.so") });
      expect(first).toEqual({
        available: true,
        driverVersion: "999.1",
        gpus: [
          {
            index: 0,
            uuid: "GPU-00000000-1111-2222-3333-444444444444",
            name: "Fake GPU",
            utilization: 0.42,
            memoryTotalBytes: 150754820096,
            memoryUsedBytes: 1073741824,
            powerUsageWatts: 123.456,
            powerLimitWatts: 700,
            energyJoules: 5001.5,
            errors: {},
          },
          {
            index: 1,
            uuid: "GPU-55555555-6666-7777-8888-999999999999",
            name: "Fake GPU",
            utilization: 0,
            memoryTotalBytes: 150754820096,
            memoryUsedBytes: 0,
            errors: {
              powerUsageWatts: "Not Supported (nvmlReturn_t 3)",
              powerLimitWatts: "Not Supported (nvmlReturn_t 3)",
              energyJoules: "Not Supported (nvmlReturn_t 3)",
            },
          },
        ],
      });
      // NVML stays initialised: the second reading is a fresh one from the same library.
      expect(second.available && second.gpus[0]?.energyJoules).toBe(5003);
    });

    it("nvmlInit_v2 failing: unavailable with NVML's own words", () => {
      const [sample] = sampleInChild({
        GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml.so"),
        FAKE_NVML_INIT_ERROR: "9",
      });
      expect(sample).toEqual({
        available: false,
        reason: "nvmlInit_v2 failed: Driver Not Loaded (nvmlReturn_t 9)",
      });
    });

    it("no GPUs, and GPUs NVML cannot open: unavailable, saying so", () => {
      expect(sampleInChild({ GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml.so"), FAKE_NVML_COUNT: "0" })[0]).toEqual({
        available: false,
        reason: "NVML reports no GPUs",
      });
      // Indexes 0 and 1 open, 2 does not: the two are read, the third left out.
      const [three] = sampleInChild({ GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml.so"), FAKE_NVML_COUNT: "3" });
      expect(three.available && three.gpus.map((g) => g.index)).toEqual([0, 1]);
    });

    it("a library without a function Galley needs: unavailable, not a crash", () => {
      const [sample] = sampleInChild({ GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml-incomplete.so") });
      expect(sample).toEqual({ available: false, reason: expect.stringMatching(/lacks a function Galley needs/) });
    });
  });
});

/** sampleGpuMemory() in a fresh Node process with `env`: its answer and that process' pid. */
function memoryInChild(env: Record<string, string>): { sample: GpuMemorySample; pid: number } {
  const script = `
    const { sampleGpuMemory } = await import(${JSON.stringify(memoryWrapper)});
    process.stdout.write(JSON.stringify({ sample: await sampleGpuMemory(), pid: process.pid }));`;
  const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    env: { ...process.env, ...env },
    encoding: "utf8",
  });
  return JSON.parse(out) as { sample: GpuMemorySample; pid: number };
}

describe("sampleGpuMemory", () => {
  it("answers without throwing: available on a GPU machine, else false with the reason", async () => {
    const sample = await sampleGpuMemory();
    expect(sample.available).toBe(existsSync("/dev/nvidiactl"));
    if (!sample.available) expect(sample.reason).toMatch(/libnvidia-ml\.so\.1|NVML|Driver/);
  });

  describe("through a stand-in libnvidia-ml", () => {
    it("free, used and total per GPU, and each compute process' memory (the buffer grown as NVML asks)", () => {
      const { sample, pid } = memoryInChild({ GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml.so") });
      const total = 150754820096;
      expect(sample).toEqual({
        available: true,
        gpus: [
          {
            index: 0,
            uuid: "GPU-00000000-1111-2222-3333-444444444444",
            freeBytes: total - 1073741824,
            usedBytes: 1073741824,
            totalBytes: total,
            processes: [{ pid, usedBytes: 536870912 }, { pid: 77, usedBytes: 1073741824 }, { pid: 4242 }],
          },
          {
            index: 1,
            uuid: "GPU-55555555-6666-7777-8888-999999999999",
            freeBytes: total,
            usedBytes: 0,
            totalBytes: total,
            processes: [],
          },
        ],
      });
    });

    it("an NVML without the process list: the memory, and why there are no processes", () => {
      const { sample } = memoryInChild({ GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml-no-processes.so") });
      expect(sample.available && sample.gpus[0]).toMatchObject({
        usedBytes: 1073741824,
        processesError: "this NVML has no nvmlDeviceGetComputeRunningProcesses_v3 or _v2",
      });
      expect(sample.available && sample.gpus[0]?.processes).toBeUndefined();
    });

    it("nvmlInit_v2 failing: unavailable with NVML's own words", () => {
      const { sample } = memoryInChild({
        GALLEY_NVML_LIBRARY: join(dir, "libfake-nvml.so"),
        FAKE_NVML_INIT_ERROR: "9",
      });
      expect(sample).toEqual({ available: false, reason: "nvmlInit_v2 failed: Driver Not Loaded (nvmlReturn_t 9)" });
    });
  });
});
