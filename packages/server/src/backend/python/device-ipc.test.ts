// DeviceIpc's bookkeeping without a GPU: what it lends (a region by its own handle, a kept tensor
// by a device copy into memory it allocates), what it borrows (opened once per allocation, read
// to the host once and counted), and that every loan and mapping ends exactly once.
import type { CudaMemory } from "@galley/backends-native";
import { describe, expect, it } from "vitest";
import { hostTransfers } from "../../base/host-transfers.js";
import type { DeviceTensor } from "../../base/tensor.js";
import { type CudaIpcApi, DeviceIpc } from "./device-ipc.js";

function fakeApi() {
  const log: string[] = [];
  let next = 0x1000n;
  const memory = (byteSize: number, handle: Uint8Array | null, what: string): CudaMemory => {
    const pointer = next;
    next += 0x1000n;
    return {
      device: 0,
      pointerDevice: 0,
      byteSize,
      pointer,
      ipcHandle: handle,
      read: async (offset, length) => Uint8Array.from({ length }, (_, i) => (offset + i) & 0xff),
      write: async () => {},
      copyTo: async (offset, target, length) => {
        log.push(`copy ${what} +${offset} → ${target.toString(16)} ${length}`);
      },
      close: () => log.push(`close ${what}`),
    };
  };
  const api: CudaIpcApi = {
    allocateCudaMemory: async (byteSize) => {
      log.push(`alloc ${byteSize}`);
      return memory(byteSize, new Uint8Array(64).fill(7), "alloc");
    },
    openCudaIpcHandle: async (handle) => {
      log.push(`open ${handle[0]}`);
      return memory(1 << 20, null, `open ${handle[0]}`);
    },
  };
  return { api: async () => api, log };
}

const region = (released: string[]): DeviceTensor => ({
  kind: "region",
  deviceId: 0,
  byteSize: 16,
  pointer: 0x9000n + 32n,
  ipc: { handle: new Uint8Array(64).fill(3), offset: 32 },
  toHost: async () => Uint8Array.from({ length: 16 }, (_, i) => i),
  release: () => released.push("region"),
});

describe("DeviceIpc", () => {
  it("lends a client's region by its own handle and a kept tensor by one device copy", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const released: string[] = [];
    const lentRegion = await ipc.lend(region(released));
    expect(lentRegion).toMatchObject({ offset: 32, deviceId: 0, byteSize: 16, key: 1 });
    expect(Buffer.from(lentRegion.handle, "base64")).toEqual(Buffer.alloc(64, 3));
    const copies: [bigint, number][] = [];
    const kept: DeviceTensor = {
      kind: "pytorch",
      deviceId: 0,
      byteSize: 40,
      toHost: async () => new Uint8Array(40),
      copyTo: async (pointer, n) => {
        copies.push([pointer, n]);
      },
      release: () => released.push("kept"),
    };
    const before = hostTransfers.snapshot().models.m ?? { onDevice: 0, deviceToHost: 0, hostToDevice: 0 };
    const lentKept = await ipc.lend(kept);
    expect(lentKept).toMatchObject({ offset: 0, byteSize: 40, key: 2 });
    expect(Buffer.from(lentKept.handle, "base64")).toEqual(Buffer.alloc(64, 7));
    expect(copies).toEqual([[0x1000n, 40]]);
    // The source goes once copied; the copy stays lent until the stub gives it back.
    expect(released).toEqual(["kept"]);
    expect(ipc.lent).toBe(2);
    ipc.drop([2, 1]);
    expect(log).toEqual(["alloc 40", "close alloc"]);
    expect(released).toEqual(["kept", "region"]);
    ipc.drop([1, 2]); // given back twice: nothing more
    expect(released).toEqual(["kept", "region"]);
    const after = hostTransfers.snapshot().models.m;
    expect((after?.onDevice ?? 0) - before.onDevice).toBe(40);
    expect(after?.deviceToHost ?? 0).toBe(before.deviceToHost);
  });

  it("refuses a device tensor it can neither forward nor copy", async () => {
    const ipc = new DeviceIpc("m", fakeApi().api);
    const bare: DeviceTensor = {
      kind: "other",
      deviceId: 0,
      byteSize: 4,
      toHost: async () => new Uint8Array(4),
      release: () => {},
    };
    await expect(ipc.lend(bare)).rejects.toThrow("of kind 'other' cannot be shared with the Python stub");
  });

  it("maps the stub's memory once per allocation: in place, copied on the device, read to the host once, given back once", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("borrow", api);
    const given: number[] = [];
    const handle = Buffer.alloc(64, 5).toString("base64");
    const a = await ipc.map({ handle, offset: 8, deviceId: 0, byteSize: 4, key: 11 }, (k) => given.push(k));
    const b = await ipc.map({ handle, offset: 64, deviceId: 0, byteSize: 2, key: 12 }, (k) => given.push(k));
    expect(a.kind).toBe("region");
    expect(a.ipc?.offset).toBe(8);
    expect(a.pointer).toBe(0x1000n + 8n);
    expect(b.pointer).toBe(0x1000n + 64n);
    expect(await a.toHost()).toEqual(Uint8Array.of(8, 9, 10, 11));
    expect(await a.toHost()).toEqual(Uint8Array.of(8, 9, 10, 11));
    expect(await b.toHost()).toEqual(Uint8Array.of(64, 65));
    // Into a client's region on the device: never more than the tensor, never more than the room.
    await a.copyTo?.(0x9000n, 100);
    await b.copyTo?.(0x9000n, 1);
    expect(log).toEqual(["open 5", "copy open 5 +8 → 9000 4", "copy open 5 +64 → 9000 1"]);
    expect(ipc.opened).toBe(1);
    expect(hostTransfers.snapshot().models.borrow?.deviceToHost).toBe(6);
    a.release();
    a.release();
    await new Promise((r) => setImmediate(r));
    expect(given).toEqual([11]);
    expect(ipc.opened).toBe(1);
    b.release();
    await new Promise((r) => setImmediate(r));
    expect(given).toEqual([11, 12]);
    expect(log.at(-1)).toBe("close open 5");
    expect(ipc.opened).toBe(0);
  });

  it("gives the stub's memory back when it cannot be mapped", async () => {
    const ipc = new DeviceIpc("m", async () => ({
      allocateCudaMemory: async () => {
        throw new Error("no");
      },
      openCudaIpcHandle: async () => {
        throw new Error("Unable to open CUDA IPC handle on device 0: CUDA_ERROR_INVALID_VALUE");
      },
    }));
    const given: number[] = [];
    const handle = Buffer.alloc(64, 1).toString("base64");
    await expect(
      ipc.map({ handle, offset: 0, deviceId: 0, byteSize: 4, key: 3 }, (k) => given.push(k)),
    ).rejects.toThrow("CUDA_ERROR_INVALID_VALUE");
    expect(given).toEqual([3]);
    expect(ipc.opened).toBe(0);
  });

  it("lends the stub's own memory back to it as a device copy (a handle does not open where it was made)", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const handle = Buffer.alloc(64, 6).toString("base64");
    const own = await ipc.map({ handle, offset: 0, deviceId: 0, byteSize: 8, key: 21 }, () => {});
    const lent = await ipc.lend(own, () => {});
    expect(Buffer.from(lent.handle, "base64")).toEqual(Buffer.alloc(64, 7));
    expect(log).toEqual(["open 6", "alloc 8", "copy open 6 +0 → 2000 8"]);
  });

  it("keeps its own loan while a tensor sent back over it is in use", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const kept: DeviceTensor = {
      kind: "pytorch",
      deviceId: 0,
      byteSize: 8,
      toHost: async () => new Uint8Array(8),
      copyTo: async () => {},
      release: () => {},
    };
    const loan = await ipc.lend(kept);
    const back = await ipc.map({ ...loan, offset: 4, byteSize: 4, server: 1 }, () => {
      throw new Error("our own loan is not given back to the stub");
    });
    // Our allocation: in place here, and by its handle for another stub.
    expect(back.pointer).toBe(0x1000n + 4n);
    expect(back.ipc?.offset).toBe(4);
    ipc.drop([loan.key]); // the stub is done with it, the response is not
    expect(log).toEqual(["alloc 8"]);
    expect(await back.toHost()).toEqual(Uint8Array.of(4, 5, 6, 7));
    back.release();
    await new Promise((r) => setImmediate(r));
    expect(log).toEqual(["alloc 8", "close alloc"]);
    expect(ipc.lent).toBe(0);
    await expect(ipc.map({ ...loan, server: 1 }, () => {})).rejects.toThrow(
      `the Python stub returned device memory ${loan.key} the server does not hold`,
    );
  });

  it("ends every loan and mapping when the stub goes", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const released: string[] = [];
    await ipc.lend(region(released));
    const handle = Buffer.alloc(64, 9).toString("base64");
    await ipc.map({ handle, offset: 0, deviceId: 0, byteSize: 4, key: 1 }, () => {});
    ipc.close();
    await new Promise((r) => setImmediate(r));
    expect(released).toEqual(["region"]);
    expect(log).toEqual(["open 9", "close open 9"]);
    await expect(ipc.lend(region(released))).rejects.toThrow("the Python stub has gone");
  });
});
