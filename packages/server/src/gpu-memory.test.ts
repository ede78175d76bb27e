import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { GpuMemory } from "@galley/backends-native";
import { afterAll, describe, expect, it } from "vitest";
import { cudaOrder } from "./gpu-memory.js";

// The stand-in libnvidia-ml the native package's tests build (its C ABI, two GPUs, three processes on GPU 0).
const fakeNvml = fileURLToPath(new URL("../../backends-native/test/fixtures/fake-nvml.c", import.meta.url));
const compiler = ["/usr/bin/cc", "/usr/bin/gcc"].find((c) => existsSync(c));
const dir = mkdtempSync(join(tmpdir(), "galley-fake-nvml-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const gpu = (index: number, uuid: string): GpuMemory => ({ index, uuid, freeBytes: 1, usedBytes: 1, totalBytes: 2 });
const gpus = [gpu(0, "GPU-aaaa-1111"), gpu(1, "GPU-bbbb-2222"), gpu(2, "GPU-cccc-3333")];
const order = (visible: string | undefined) => [...cudaOrder(gpus, visible)].map(([ordinal, g]) => [ordinal, g.index]);

describe("cudaOrder", () => {
  it("is NVML's order without CUDA_VISIBLE_DEVICES, and CUDA's with it (indexes or UUID prefixes, up to the first it cannot use)", () => {
    expect(order(undefined)).toEqual([
      [0, 0],
      [1, 1],
      [2, 2],
    ]);
    expect(order("2,0")).toEqual([
      [0, 2],
      [1, 0],
    ]);
    expect(order("GPU-bbbb,cccc-3333")).toEqual([
      [0, 1],
      [1, 2],
    ]);
    expect(order("1,7,0")).toEqual([[0, 1]]);
    // Empty hides every GPU from CUDA: none here either.
    expect(order("")).toEqual([]);
    expect(order("-1")).toEqual([]);
  });
});

describe("nvmlMemoryReader", () => {
  it("reads no GPUs and releases nothing where NVML does not load, without throwing", async () => {
    const script = `
      const { nvmlMemoryReader } = await import(${JSON.stringify(fileURLToPath(new URL("./gpu-memory.ts", import.meta.url)))});
      const reader = nvmlMemoryReader();
      const size = (await reader.read()).size;
      await reader.releaseCache();
      process.stdout.write(String(size));`;
    const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      env: { ...process.env, GALLEY_NVML_LIBRARY: join(dir, "no-such-libnvidia-ml.so") },
      encoding: "utf8",
    });
    expect(out).toBe("0");
  });

  it("through a stand-in libnvidia-ml: each GPU by CUDA ordinal, with this process' memory", () => {
    // Built with cc (CI's machines have the one node-gyp uses): without one this fails, saying why.
    if (!compiler) throw new Error("the stand-in libnvidia-ml is built with cc: install a C compiler (gcc)");
    const library = join(dir, "libfake-nvml.so");
    execFileSync(compiler as string, ["-shared", "-fPIC", "-O1", "-o", library, fakeNvml]);
    const script = `
      const { nvmlMemoryReader } = await import(${JSON.stringify(fileURLToPath(new URL("./gpu-memory.ts", import.meta.url)))});
      const readings = await nvmlMemoryReader("1,0").read();
      process.stdout.write(JSON.stringify({ pid: process.pid, readings: [...readings] }));`;
    const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      env: { ...process.env, GALLEY_NVML_LIBRARY: library },
      encoding: "utf8",
    });
    const { pid, readings } = JSON.parse(out) as { pid: number; readings: [number, { processes: unknown[] }][] };
    // CUDA_VISIBLE_DEVICES=1,0: NVML's GPU 1 (no process) is CUDA's 0, NVML's 0 (this process among three) CUDA's 1.
    expect(readings).toEqual([
      [0, { freeBytes: 150754820096, usedBytes: 0, totalBytes: 150754820096, processes: [] }],
      [
        1,
        {
          freeBytes: 150754820096 - 2 ** 30,
          usedBytes: 2 ** 30,
          totalBytes: 150754820096,
          processes: [{ pid, usedBytes: 2 ** 29 }, { pid: 77, usedBytes: 2 ** 30 }, { pid: 4242 }],
        },
      ],
    ]);
  });
});
