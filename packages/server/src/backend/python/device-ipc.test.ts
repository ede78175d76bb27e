// DeviceIpc's bookkeeping without a GPU: what it lends (a region by its own handle, a kept tensor
// by a device copy into memory it allocates), what it borrows (opened once per allocation, read
// to the host once and counted), and that every loan and mapping ends exactly once.
import type { CudaMemory } from "@galley/backends-native";
import { describe, expect, it } from "vitest";
import { hostTransfers } from "../../base/host-transfers.js";
import type { DeviceTensor } from "../../base/tensor.js";
import { type CudaIpcApi, DeviceIpc, IDLE_MAPPINGS } from "./device-ipc.js";

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
    // libtorch's allocations here are at 0x7000_0000 and up (1 MiB each); anything else the driver refuses.
    exportCudaIpcHandle: async (pointer) => {
      if (pointer < 0x7000_0000n) throw new Error("Unable to export CUDA memory on device 0: cuIpcGetMemHandle failed");
      log.push(`export ${pointer.toString(16)}`);
      return { handle: new Uint8Array(64).fill(Number((pointer >> 20n) & 0xffn)), offset: Number(pointer & 0xfffffn) };
    },
    // The event fires when the test says (`fire`), as the writer's GPU work would end.
    waitCudaIpcEvent: (handle) => {
      log.push(`wait event ${handle[0]}`);
      return new Promise<void>((resolve) => fired.push(resolve));
    },
  };
  const fired: (() => void)[] = [];
  const fire = () => {
    for (const resolve of fired.splice(0)) resolve();
  };
  return { api: async () => api, log, fire };
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
    // Idle, still mapped: torch hands the same allocation out again, and it is not opened twice.
    expect(ipc.opened).toBe(1);
    const c = await ipc.map({ handle, offset: 0, deviceId: 0, byteSize: 4, key: 13 }, (k) => given.push(k));
    c.release();
    await new Promise((r) => setImmediate(r));
    expect(log.filter((l) => l.startsWith("open") || l.startsWith("close"))).toEqual(["open 5"]);
  });

  it(`keeps at most ${IDLE_MAPPINGS} idle mappings of the stub's, closing the least recently used`, async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const wire = (n: number) => ({
      handle: Buffer.alloc(64, n).toString("base64"),
      offset: 0,
      deviceId: 0,
      byteSize: 4,
      key: n,
    });
    const inUse = await ipc.map(wire(100), () => {});
    for (let n = 1; n <= IDLE_MAPPINGS + 2; n++) (await ipc.map(wire(n), () => {})).release();
    await new Promise((r) => setImmediate(r));
    // The one in use stays whatever its age; the two oldest idle ones went.
    expect(ipc.opened).toBe(IDLE_MAPPINGS + 1);
    expect(log.filter((l) => l.startsWith("close"))).toEqual(["close open 1", "close open 2"]);
    inUse.release();
    await new Promise((r) => setImmediate(r));
    expect(log.filter((l) => l.startsWith("close"))).toEqual(["close open 1", "close open 2", "close open 3"]);
    ipc.close();
    await new Promise((r) => setImmediate(r));
    expect(log.filter((l) => l.startsWith("close"))).toHaveLength(IDLE_MAPPINGS + 3);
    expect(ipc.opened).toBe(0);
  });

  it("lends a libtorch tensor by the handle of libtorch's allocation, with no copy; a copy only where the driver refuses", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const released: string[] = [];
    const kept = (pointer: bigint): DeviceTensor => ({
      kind: "pytorch",
      deviceId: 0,
      byteSize: 64,
      pointer,
      toHost: async () => new Uint8Array(64),
      copyTo: async () => {
        log.push("device copy");
      },
      release: () => released.push(pointer.toString(16)),
    });
    const byHandle = await ipc.lend(kept(0x7030_0040n));
    expect(byHandle).toMatchObject({ offset: 0x40, byteSize: 64 });
    expect(Buffer.from(byHandle.handle, "base64")).toEqual(Buffer.alloc(64, 0x03));
    expect(released).toEqual([]); // held until the stub gives it back
    // Sent back by the stub (a model returning its input): in place here, and by the same handle.
    const back = await ipc.map({ ...byHandle, offset: 0x50, byteSize: 16, server: 1 }, () => {});
    expect(back.pointer).toBe(0x7030_0050n);
    expect(back.ipc?.offset).toBe(0x50);
    expect(Buffer.from(back.ipc?.handle ?? []).equals(Buffer.alloc(64, 0x03))).toBe(true);
    ipc.drop([byHandle.key]);
    expect(released).toEqual([]);
    back.release();
    await new Promise((r) => setImmediate(r));
    expect(released).toEqual(["70300040"]);
    const copied = await ipc.lend(kept(0x1000n));
    expect(Buffer.from(copied.handle, "base64")).toEqual(Buffer.alloc(64, 7));
    expect(log).toEqual(["export 70300040", "alloc 64", "device copy"]);
    expect(released).toEqual(["70300040", "1000"]);
  });

  it("shares without a copy or not at all (a BLS reply's loans): a region, a libtorch tensor; not the stub's own memory", async () => {
    const { api, log } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const released: string[] = [];
    const torch = (pointer: bigint): DeviceTensor => ({
      kind: "pytorch",
      deviceId: 0,
      byteSize: 8,
      pointer,
      toHost: async () => new Uint8Array(8),
      copyTo: async () => {
        log.push("device copy");
      },
      release: () => released.push(pointer.toString(16)),
    });
    expect(await ipc.share(region(released))).toMatchObject({ offset: 32, byteSize: 16 });
    expect(await ipc.share(torch(0x7010_0000n))).toMatchObject({ offset: 0, byteSize: 8 });
    expect(await ipc.share(torch(0x1000n))).toBeUndefined(); // the driver refuses: only a copy would do
    const handle = Buffer.alloc(64, 6).toString("base64");
    const own = await ipc.map({ handle, offset: 0, deviceId: 0, byteSize: 8, key: 21 }, () => {});
    expect(await ipc.share(own)).toBeUndefined();
    expect(log).toEqual(["export 70100000", "open 6"]);
    expect(released).toEqual([]); // nothing let go by a refusal: the caller still holds it
    expect(ipc.lent).toBe(2);
    ipc.close();
    expect(released).toEqual(["region", "70100000"]);
    await expect(ipc.share(region(released))).rejects.toThrow("the Python stub has gone");
  });

  it("gives the stub's memory back when it cannot be mapped", async () => {
    const ipc = new DeviceIpc("m", async () => ({
      allocateCudaMemory: async () => {
        throw new Error("no");
      },
      openCudaIpcHandle: async () => {
        throw new Error("Unable to open CUDA IPC handle on device 0: CUDA_ERROR_INVALID_VALUE");
      },
      exportCudaIpcHandle: async () => {
        throw new Error("no");
      },
      waitCudaIpcEvent: async () => {
        throw new Error("no");
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

  it("lends memory another instance of its stub process mapped as a device copy too (SHARED_STUB_PROCESS)", async () => {
    const { api, log } = fakeApi();
    const peers = new Set<DeviceIpc>();
    const a = new DeviceIpc("m", api, peers);
    const b = new DeviceIpc("m", api, peers);
    const handle = Buffer.alloc(64, 6).toString("base64");
    const fromA = await a.map({ handle, offset: 0, deviceId: 0, byteSize: 8, key: 21 }, () => {});
    const lent = await b.lend(fromA, () => {});
    expect(Buffer.from(lent.handle, "base64")).toEqual(Buffer.alloc(64, 7));
    expect(log).toEqual(["open 6", "alloc 8", "copy open 6 +0 → 2000 8"]);
    // Once a is gone (its process restarted), its mappings are no longer b's process's.
    a.close();
    expect(peers.has(a)).toBe(false);
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

  it("waits for a stub tensor's event before reading it on the host and hands the event on with it", async () => {
    const { api, log, fire } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const given: number[] = [];
    const event = Buffer.alloc(64, 9).toString("base64");
    const wire = {
      handle: Buffer.alloc(64, 5).toString("base64"),
      offset: 0,
      deviceId: 0,
      byteSize: 16,
      key: 4,
      event,
    };
    const mapped = await ipc.map(wire, (key) => given.push(key));
    expect(mapped.event).toEqual(new Uint8Array(64).fill(9));
    let read = false;
    const host = mapped.toHost().then(() => {
      read = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(log).toContain("wait event 9");
    expect(read).toBe(false); // the stub's GPU work may still be writing it
    fire();
    await host;
    expect(read).toBe(true);
    // Lent on to another stub by its handle: the event goes along.
    const other = new DeviceIpc("n", api);
    const lent = await other.share(mapped, () => {});
    expect(lent?.event).toBe(event);
    mapped.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(given).toEqual([4]);
  });

  it("gives a stub tensor back only once every deferred batch reading it has ended", async () => {
    const { api } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const given: number[] = [];
    const wire = { handle: Buffer.alloc(64, 6).toString("base64"), offset: 0, deviceId: 0, byteSize: 16, key: 8 };
    const mapped = await ipc.map(wire, (key) => given.push(key));
    let end = () => {};
    mapped.settleAfter?.(new Promise<void>((resolve) => (end = resolve)));
    mapped.release();
    mapped.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(given).toEqual([]); // the batch's GPU work still reads it
    end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(given).toEqual([8]);
  });

  it("refuses an event handle that is not 64 bytes and gives the tensor back", async () => {
    const { api } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const given: number[] = [];
    const wire = { handle: Buffer.alloc(64, 6).toString("base64"), offset: 0, deviceId: 0, byteSize: 16, key: 9 };
    await expect(ipc.map({ ...wire, event: "AAAA" }, (key) => given.push(key))).rejects.toThrow(
      "a CUDA IPC event handle must be 64 bytes (base64)",
    );
    expect(given).toEqual([9]);
  });

  it("lends a deferred libtorch output with its batch's event", async () => {
    const { api } = fakeApi();
    const ipc = new DeviceIpc("m", api);
    const kept: DeviceTensor = {
      kind: "pytorch",
      deviceId: 0,
      byteSize: 16,
      pointer: 0x7010_0000n,
      event: new Uint8Array(64).fill(4),
      toHost: async () => new Uint8Array(16),
      release: () => {},
    };
    const lent = await ipc.share(kept);
    expect(lent?.event).toBe(Buffer.alloc(64, 4).toString("base64"));
  });
});
