// CUDA device memory through the addon. Here (no GPU) every call must reject with the driver's
// absence, never crash. Real memory is checked on a GPU machine by test/gpu/cuda-shm-gpu.mjs
// (allocate, write, read back, IPC handles, ranges), run by test/gpu/device-run.sh.
import { existsSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  allocateCudaMemory,
  CUDA_IPC_HANDLE_BYTES,
  exportCudaIpcHandle,
  loadBinding,
  openCudaIpcHandle,
  waitCudaIpcEvent,
} from "../src/index.js";

const gpuMachine = existsSync("/dev/nvidiactl") && existsSync("/dev/nvidia0");

describe("CUDA memory: argument checks (before the driver is touched)", () => {
  it("refuses a handle that is not 64 bytes, and bad devices", async () => {
    expect(CUDA_IPC_HANDLE_BYTES).toBe(64);
    await expect(openCudaIpcHandle(new Uint8Array(63), 0)).rejects.toThrow(
      "Unable to open CUDA IPC handle on device 0: the handle must be 64 bytes, got 63",
    );
    for (const device of [-1, 1.5, Number.NaN, 2 ** 31]) {
      await expect(openCudaIpcHandle(new Uint8Array(64), device)).rejects.toThrow(
        /the device must be a non-negative integer/,
      );
    }
  });

  it("refuses sizes that are not positive integers", async () => {
    for (const size of [0, -1, 0.5, 2 ** 53, Number.POSITIVE_INFINITY]) {
      await expect(allocateCudaMemory(size, 0)).rejects.toThrow(
        `Unable to allocate ${size} bytes on CUDA device 0: the size must be a positive integer`,
      );
    }
  });

  it("the raw addon checks its arguments again (TypeError/RangeError, no crash)", () => {
    const binding = loadBinding();
    expect(() => binding.cudaIpcOpen(undefined as unknown as Uint8Array, 0)).toThrow(TypeError);
    expect(() => binding.cudaIpcOpen(new Uint8Array(65), 0)).toThrow("a CUDA IPC handle is 64 bytes, got 65");
    expect(() => binding.cudaIpcOpen(new Uint8Array(64), -1)).toThrow(RangeError);
    expect(() => binding.cudaAlloc(0, 0)).toThrow("byteSize must be positive");
    expect(() => binding.cudaAlloc(2 ** 60, 0)).toThrow(RangeError);
    expect(() => binding.cudaExport(1 as unknown as bigint, 0)).toThrow(TypeError);
    expect(() => binding.cudaExport(0n, 0)).toThrow("pointer must be a device address");
    expect(() => binding.cudaExport(2n ** 70n, 0)).toThrow("pointer must be a device address");
    expect(() => binding.cudaExport(0x1000n, -1)).toThrow(RangeError);
    expect(() => binding.cudaWaitEvent(new Uint8Array(63), 0)).toThrow("a CUDA IPC event handle is 64 bytes, got 63");
    expect(() => binding.cudaWaitEvent(new Uint8Array(64), -1)).toThrow(RangeError);
  });

  it("refuses to export what is not a device address", async () => {
    for (const pointer of [0n, -4n, 1 as unknown as bigint]) {
      await expect(exportCudaIpcHandle(pointer, 0)).rejects.toThrow(
        "Unable to export CUDA memory on device 0: the pointer must be a device address",
      );
    }
    await expect(exportCudaIpcHandle(0x1000n, -1)).rejects.toThrow(/the device must be a non-negative integer/);
  });

  it("refuses an event handle that is not 64 bytes", async () => {
    await expect(waitCudaIpcEvent(new Uint8Array(12), 0)).rejects.toThrow(
      "Unable to wait for a CUDA event on device 0: a CUDA IPC event handle is a 64-byte Uint8Array",
    );
    await expect(waitCudaIpcEvent(new Uint8Array(64), 1.5)).rejects.toThrow(
      /the device must be a non-negative integer/,
    );
  });
});

describe.skipIf(gpuMachine)("CUDA memory without a CUDA driver", () => {
  it("rejects open and allocate with the driver's absence", async () => {
    await expect(openCudaIpcHandle(new Uint8Array(64), 0)).rejects.toThrow(
      /^Unable to open CUDA IPC handle on device 0: the CUDA driver is unavailable: libcuda\.so\.1/,
    );
    await expect(allocateCudaMemory(16, 0)).rejects.toThrow(
      /^Unable to allocate 16 bytes on CUDA device 0: the CUDA driver is unavailable: libcuda\.so\.1/,
    );
    await expect(exportCudaIpcHandle(0x1000n, 0)).rejects.toThrow(
      /^Unable to export CUDA memory on device 0: the CUDA driver is unavailable: libcuda\.so\.1/,
    );
    await expect(waitCudaIpcEvent(new Uint8Array(64), 0)).rejects.toThrow(
      /^Unable to wait for a CUDA event on device 0: the CUDA driver is unavailable: libcuda\.so\.1/,
    );
  });

  it("answers concurrent calls the same way (the driver is looked for once)", async () => {
    const all = await Promise.allSettled([allocateCudaMemory(8, 0), allocateCudaMemory(8, 1)]);
    expect(all.map((r) => r.status)).toEqual(["rejected", "rejected"]);
  });
});
