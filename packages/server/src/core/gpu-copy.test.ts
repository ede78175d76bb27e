// Copies between GPUs (issue 55) on a machine without GPUs: the route decision, and the core's
// moves with a stand-in CUDA (device memory as host buffers by address, on a GPU number) under the
// real GpuCopies, placeInputs and SharedMemoryManager. The GPU side runs in
// backends-native/test/gpu/multi-gpu.mjs.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { hostTransfers } from "../base/host-transfers.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { type DeviceTensor, NO_BYTES } from "../base/tensor.js";
import { placeInputs } from "./device-placement.js";
import { type GpuAllocation, GpuCopies, gpuCopyRoute } from "./gpu-copy.js";
import { CUDA_IPC_HANDLE_BYTES, type CudaRegionMemory, SharedMemoryManager } from "./shared-memory.js";

/** Device memory of a stand-in machine: each allocation's bytes and GPU, by address. */
class StandInGpus {
  readonly memory = new Map<bigint, { device: number; bytes: Uint8Array }>();
  readonly copies: { from: number; to: number; bytes: number }[] = [];
  #next = 0x7f00_0000_0000n;

  constructor(readonly peerAccess: boolean[][]) {}

  alloc(byteSize: number, device: number): { pointer: bigint; bytes: Uint8Array } {
    const pointer = this.#next;
    this.#next += 0x10_0000n;
    const bytes = new Uint8Array(byteSize);
    this.memory.set(pointer, { device, bytes });
    return { pointer, bytes };
  }

  /** A device-to-device copy as the driver does it: into the allocation at `target` on `device`. */
  copy(from: number, source: Uint8Array, target: bigint, device: number): void {
    const into = this.memory.get(target);
    if (!into) throw new Error(`no allocation at ${target}`);
    if (into.device !== device) throw new Error(`the target is on GPU ${into.device}, not ${device}`);
    into.bytes.set(source);
    this.copies.push({ from, to: device, bytes: source.byteLength });
  }

  driver() {
    return {
      allocate: async (byteSize: number, device: number): Promise<GpuAllocation> => {
        const { pointer, bytes } = this.alloc(byteSize, device);
        return {
          pointer,
          read: async (offset: number, length: number) => bytes.slice(offset, offset + length),
          close: () => {
            this.memory.delete(pointer);
          },
        };
      },
      peerAccess: async () => this.peerAccess,
    };
  }

  /** A tensor a backend kept on GPU `device` (its own copy to any GPU, as the torch addon's). */
  kept(device: number, bytes: Uint8Array): DeviceTensor & { released: boolean } {
    return {
      kind: "pytorch",
      deviceId: device,
      byteSize: bytes.byteLength,
      released: false,
      toHost: async () => bytes,
      copyTo: async (pointer, _room, to) => this.copy(device, bytes, pointer, to ?? device),
      release() {
        this.released = true;
      },
    };
  }
}

const request = (inputs: InferenceRequest["inputs"]): InferenceRequest => ({
  modelName: "stage",
  modelVersion: "",
  id: "",
  parameters: {},
  inputs,
  outputs: [],
});

const PEERS = [
  [true, true, false],
  [true, true, false],
  [false, false, true],
];

let before: ReturnType<typeof hostTransfers.snapshot>["models"][string] | undefined;
const moved = (model: string) => {
  const now = hostTransfers.snapshot().models[model];
  const was = before ?? { hostToDevice: 0, deviceToHost: 0, onDevice: 0, betweenGpus: 0 };
  return {
    hostToDevice: (now?.hostToDevice ?? 0) - was.hostToDevice,
    deviceToHost: (now?.deviceToHost ?? 0) - was.deviceToHost,
    betweenGpus: (now?.betweenGpus ?? 0) - was.betweenGpus,
  };
};

describe("gpuCopyRoute", () => {
  it("is in place on one GPU, a peer copy where the target GPU reads the source, staged by the driver otherwise", () => {
    expect(gpuCopyRoute(1, 1, [])).toBe("same-gpu");
    expect(gpuCopyRoute(0, 1, PEERS)).toBe("peer");
    expect(gpuCopyRoute(1, 0, PEERS)).toBe("peer");
    expect(gpuCopyRoute(0, 2, PEERS)).toBe("staged");
    expect(gpuCopyRoute(2, 1, PEERS)).toBe("staged");
    // One-way access: what counts is whether the target reads the source.
    expect(
      gpuCopyRoute(0, 1, [
        [true, false],
        [true, true],
      ]),
    ).toBe("peer");
    expect(
      gpuCopyRoute(1, 0, [
        [true, false],
        [true, true],
      ]),
    ).toBe("staged");
    // GPUs the matrix does not cover (no driver answer): staged.
    expect(gpuCopyRoute(0, 7, PEERS)).toBe("staged");
  });
});

describe("GpuCopies", () => {
  beforeEach(() => {
    before = hostTransfers.snapshot().models.stage;
  });

  it("copies a kept tensor into memory on the target GPU, counts it between GPUs (no host bytes) and frees it on release", async () => {
    const gpus = new StandInGpus(PEERS);
    const lines: string[] = [];
    const copies = new GpuCopies(gpus.driver(), { info: (line) => lines.push(line) });
    const bytes = Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const source = gpus.kept(1, bytes);
    const copy = await copies.move(source, 0, "stage");
    expect(copy?.route).toBe("peer");
    expect(copy?.tensor).toMatchObject({ kind: "region", deviceId: 0, byteSize: 8 });
    const at = gpus.memory.get(copy?.tensor.pointer as bigint);
    expect(at?.device).toBe(0);
    expect([...(at?.bytes ?? [])]).toEqual([...bytes]);
    expect(gpus.copies).toEqual([{ from: 1, to: 0, bytes: 8 }]);
    expect(moved("stage")).toEqual({ hostToDevice: 0, deviceToHost: 0, betweenGpus: 8 });
    // The source stays its owner's; the copy is freed once, by the request that asked for it.
    expect(source.released).toBe(false);
    copy?.release();
    copy?.release();
    expect(gpus.memory.size).toBe(0);
    expect((await copies.move(gpus.kept(2, bytes), 0, "stage"))?.route).toBe("staged");
    await copies.move(gpus.kept(1, bytes), 0, "stage");
    // One line per pair of GPUs, at its first copy.
    expect(lines).toEqual([
      "tensors from GPU 1 to GPU 0 are copied device to device: peer to peer",
      "tensors from GPU 2 to GPU 0 are copied device to device: staged by the CUDA driver (the GPUs are not peers)",
    ]);
  });

  it("reads the copy to the host once, counted, for a consumer that needs bytes", async () => {
    const gpus = new StandInGpus(PEERS);
    const copy = await new GpuCopies(gpus.driver()).move(gpus.kept(0, Uint8Array.from([9, 8, 7])), 1, "stage");
    const [a, b] = await Promise.all([copy?.tensor.toHost(), copy?.tensor.toHost()]);
    expect([...(a ?? [])]).toEqual([9, 8, 7]);
    expect(b).toBe(a);
    expect(moved("stage")).toMatchObject({ deviceToHost: 3, betweenGpus: 3 });
  });

  it("leaves a tensor on its own GPU, or one without a device copy, to the caller; frees the memory of a failed copy", async () => {
    const gpus = new StandInGpus(PEERS);
    const copies = new GpuCopies(gpus.driver());
    expect(await copies.move(gpus.kept(0, new Uint8Array(4)), 0, "stage")).toBeUndefined();
    const { copyTo: _, ...hostOnly } = gpus.kept(1, new Uint8Array(4));
    expect(await copies.move(hostOnly, 0, "stage")).toBeUndefined();
    const failing: DeviceTensor = {
      ...gpus.kept(1, new Uint8Array(4)),
      copyTo: async () => {
        throw new Error("cuMemcpyPeer failed: CUDA_ERROR_ILLEGAL_ADDRESS");
      },
    };
    await expect(copies.move(failing, 0, "stage")).rejects.toThrow("CUDA_ERROR_ILLEGAL_ADDRESS");
    expect(gpus.memory.size).toBe(0);
    expect(moved("stage").betweenGpus).toBe(0);
  });
});

describe("placeInputs across GPUs", () => {
  const regions: SharedMemoryManager[] = [];
  afterEach(async () => {
    for (const shm of regions.splice(0)) await shm.close();
  });
  beforeEach(() => {
    before = hostTransfers.snapshot().models.stage;
  });

  /** A server with GPUs 0 and 1 whose CUDA regions are stand-in memory (copies to other GPUs included). */
  function server(gpus: StandInGpus) {
    const shm = new SharedMemoryManager(true, {
      gpus: async () => [0, 1],
      open: async (_handle, device): Promise<CudaRegionMemory> => {
        const { pointer, bytes } = gpus.alloc(64, device);
        bytes.set([10, 11, 12, 13, 14, 15, 16, 17], 8);
        return {
          byteSize: 64,
          pointer,
          read: async (offset, length) => bytes.slice(offset, offset + length),
          write: async (offset, data) => bytes.set(data, offset),
          copyTo: async (offset, target, length, to) =>
            gpus.copy(device, bytes.slice(offset, offset + length), target, to ?? device),
          close: () => {},
        };
      },
    });
    regions.push(shm);
    return shm;
  }
  const ref = { region: "r", offset: 8, byteSize: 8 };
  const input = { name: "x", datatype: "UINT8" as const, shape: [8], data: NO_BYTES, parameters: {} };

  it("uses a CUDA region on device 1 in place for a model on GPU 1, and copies it device to device for one on GPU 0", async () => {
    const gpus = new StandInGpus(PEERS);
    const shm = server(gpus);
    await shm.registerCuda("r", new Uint8Array(CUDA_IPC_HANDLE_BYTES), 1n, 64n);
    const copies = new GpuCopies(gpus.driver());

    const same = request([{ ...input, sharedMemory: ref }]);
    const holds: (() => void)[] = [];
    await placeInputs(same, shm, "stage", { deviceId: 1, kind: "pytorch" }, holds, copies);
    expect(same.inputs[0]?.device).toMatchObject({ kind: "region", deviceId: 1 });
    expect(gpus.copies).toEqual([]);
    for (const release of holds.splice(0)) release();

    const other = request([{ ...input, sharedMemory: ref }]);
    await placeInputs(other, shm, "stage", { deviceId: 0, kind: "pytorch" }, holds, copies);
    const device = other.inputs[0]?.device;
    expect(device).toMatchObject({ kind: "region", deviceId: 0, byteSize: 8 });
    expect([...(gpus.memory.get(device?.pointer as bigint)?.bytes ?? [])]).toEqual([10, 11, 12, 13, 14, 15, 16, 17]);
    expect(gpus.copies).toEqual([{ from: 1, to: 0, bytes: 8 }]);
    expect(moved("stage")).toEqual({ hostToDevice: 0, deviceToHost: 0, betweenGpus: 8 });
    // The region is not held past the copy (an unregister goes through); the copy is, until the request ends.
    await shm.unregister("r", "cuda");
    expect(shm.cudaStatus("")).toEqual([]);
    const allocated = gpus.memory.size;
    for (const release of holds.splice(0)) release();
    expect(gpus.memory.size).toBe(allocated - 1);
  });

  it("copies a tensor kept on another GPU device to device, and through the host only without copies or for a model on no GPU", async () => {
    const gpus = new StandInGpus(PEERS);
    const shm = server(gpus);
    const copies = new GpuCopies(gpus.driver());
    const bytes = Uint8Array.from([1, 2, 3, 4]);
    const holds: (() => void)[] = [];

    const kept = gpus.kept(1, bytes);
    const across = request([{ ...input, shape: [4], device: kept }]);
    await placeInputs(across, shm, "stage", { deviceId: 0, kind: "pytorch" }, holds, copies);
    expect(across.inputs[0]?.device).toMatchObject({ kind: "region", deviceId: 0 });
    expect(kept.released).toBe(false);
    expect(holds).toHaveLength(1);
    expect(moved("stage").betweenGpus).toBe(4);

    // Without copies between GPUs (no GpuCopies), and for a model on the host: host bytes.
    for (const [placement, with_] of [
      [{ deviceId: 0, kind: "pytorch" }, undefined],
      [undefined, copies],
    ] as const) {
      const host = request([{ ...input, shape: [4], device: gpus.kept(1, bytes) }]);
      await placeInputs(host, shm, "stage", placement, [], with_);
      expect(host.inputs[0]?.device).toBeUndefined();
      expect([...(host.inputs[0]?.data ?? [])]).toEqual([1, 2, 3, 4]);
    }
    // Same GPU, same backend: taken as it is.
    const same = request([{ ...input, shape: [4], device: kept }]);
    await placeInputs(same, shm, "stage", { deviceId: 1, kind: "pytorch" }, [], copies);
    expect(same.inputs[0]?.device).toBe(kept);
    expect(gpus.copies).toHaveLength(1);
    for (const release of holds) release();
  });
});
