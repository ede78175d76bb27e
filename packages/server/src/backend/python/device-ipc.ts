// GPU tensors between the server and a Python stub through CUDA IPC (issue 50; the design is in
// `python/galley_cuda.py`). The server lends device memory to the stub (a client's CUDA region or
// another stub's tensor by its own handle, a tensor a libtorch model kept by the handle of
// libtorch's allocation, and only what cannot be shared so by a device-to-device copy into memory
// it allocates) and borrows the stub's (a model's torch tensor, opened here with the stub's
// handle). Each loan has a key; the borrower gives it back, and a stub that goes away gives
// everything back at once (`close`). The stub's allocations stay mapped here a while after their
// last tensor goes ({@link IDLE_MAPPINGS}): torch's caching allocator hands the same ones out
// again, and opening a handle costs far more than a denoising step's arithmetic.
import type { CudaMemory } from "@galley/backends-native";
import { hostTransfers } from "../../base/host-transfers.js";
import type { DeviceTensor } from "../../base/tensor.js";
import type { IpcTensor } from "./python-messages.js";

/** What this needs of `@galley/backends-native` (a test passes its own). */
export interface CudaIpcApi {
  allocateCudaMemory(byteSize: number, device: number): Promise<CudaMemory>;
  openCudaIpcHandle(handle: Uint8Array, device: number): Promise<CudaMemory>;
  exportCudaIpcHandle(pointer: bigint, device: number): Promise<{ handle: Uint8Array; offset: number }>;
  /** Settles once another process's event (its 64-byte IPC handle) has fired. */
  waitCudaIpcEvent(handle: Uint8Array, device: number): Promise<void>;
}

const nativeApi = async (): Promise<CudaIpcApi> => {
  const native = await import("@galley/backends-native");
  return {
    allocateCudaMemory: native.allocateCudaMemory,
    openCudaIpcHandle: native.openCudaIpcHandle,
    exportCudaIpcHandle: native.exportCudaIpcHandle,
    waitCudaIpcEvent: native.waitCudaIpcEvent,
  };
};

/** How many of the stub's allocations stay mapped here with no tensor over them (least recently used go first). */
export const IDLE_MAPPINGS = 16;

interface Opened {
  memory: Promise<CudaMemory>;
  count: number;
}

interface Loan {
  /** The stub's and the server's own borrowings of it; let go at 0. */
  refs: number;
  deviceId: number;
  /** Memory allocated here for the loan; absent for another process's memory lent by its handle. */
  memory?: CudaMemory;
  /** The lent tensor itself (another process's memory: its host copy comes from there). */
  device: DeviceTensor;
  /** Its byte offset in the allocation the handle names. */
  offset: number;
  /** The handle it was lent by (absent for memory allocated here, which has its own). */
  handle?: Uint8Array;
  release: () => void;
}

export class DeviceIpc {
  readonly #model: string;
  readonly #api: () => Promise<CudaIpcApi>;
  /** Loans to the stub by key. */
  readonly #lent = new Map<number, Loan>();
  /** The stub's allocations opened here: handle (base64) + device → the mapping and its users. */
  readonly #opened = new Map<string, Opened>();
  #nextKey = 1;
  #closed = false;
  /** The DeviceIpc of every instance in the same stub process (this one included). */
  readonly #peers: Set<DeviceIpc>;

  /**
   * `peers`: those of the other instances that share the stub process (`SHARED_STUB_PROCESS`),
   * whose mappings are that process's memory too; this one joins them until {@link close}.
   */
  constructor(model: string, api: () => Promise<CudaIpcApi> = nativeApi, peers: Set<DeviceIpc> = new Set()) {
    this.#model = model;
    this.#api = api;
    this.#peers = peers;
    peers.add(this);
  }

  /** Whether `id` names memory of the stub process (mapped here or by an instance beside this one). */
  #stubs(id: string): boolean {
    for (const peer of this.#peers) if (peer.#opened.has(id)) return true;
    return false;
  }

  /**
   * Lend `device` to the stub without copying it — another process's memory by its own handle, a
   * libtorch tensor by the handle of libtorch's allocation — or undefined where only a copy can
   * share it (nothing is lent then, and `release` has not run).
   */
  async share(device: DeviceTensor, release: () => void = () => device.release()): Promise<IpcTensor | undefined> {
    if (this.#closed) throw new Error("the Python stub has gone");
    // The stub's own memory cannot be opened in the stub (CUDA's rule): it gets a copy.
    const own = device.ipc && this.#stubs(`${device.deviceId}:${Buffer.from(device.ipc.handle).toString("base64")}`);
    if (device.ipc && !own) return this.#lendHandle(device, device.ipc, release);
    if (device.pointer === undefined || device.kind === "region" || own) return undefined;
    // A libtorch tensor: the stub maps libtorch's allocation (the tensor is kept until it gives it back).
    const exported = await (await this.#api())
      .exportCudaIpcHandle(device.pointer, device.deviceId)
      .catch(() => undefined);
    return exported && !this.#closed ? this.#lendHandle(device, exported, release) : undefined;
  }

  #lendHandle(device: DeviceTensor, ipc: { handle: Uint8Array; offset: number }, release: () => void): IpcTensor {
    const key = this.#nextKey++;
    this.#lent.set(key, {
      refs: 1,
      deviceId: device.deviceId,
      device,
      offset: ipc.offset,
      handle: ipc.handle,
      release,
    });
    hostTransfers.record(this.#model, { onDevice: device.byteSize });
    return {
      handle: Buffer.from(ipc.handle).toString("base64"),
      offset: ipc.offset,
      deviceId: device.deviceId,
      byteSize: device.byteSize,
      key,
      // A deferred batch's output: the stub's stream waits for the batch's event before reading.
      ...(device.event ? { event: Buffer.from(device.event).toString("base64") } : {}),
    };
  }

  /**
   * Lend `device` to the stub: memory of another process (a client's CUDA region) by its own
   * handle, a kept tensor by one device-to-device copy into memory allocated here. `release` runs
   * when the loan ends (the stub gave it back and nothing here uses it).
   */
  async lend(device: DeviceTensor, release: () => void = () => device.release()): Promise<IpcTensor> {
    const shared = await this.share(device, release);
    if (shared) return shared;
    if (!device.copyTo) {
      throw new Error(
        `a tensor on GPU ${device.deviceId} of kind '${device.kind}' cannot be shared with the Python stub`,
      );
    }
    const key = this.#nextKey++;
    const memory = await (await this.#api()).allocateCudaMemory(Math.max(device.byteSize, 1), device.deviceId);
    try {
      await device.copyTo(memory.pointer, memory.byteSize);
    } catch (error) {
      memory.close();
      throw error;
    } finally {
      release();
    }
    if (!memory.ipcHandle || this.#closed) {
      memory.close();
      throw new Error(
        this.#closed ? "the Python stub has gone" : "CUDA memory allocated for the stub has no IPC handle",
      );
    }
    this.#lent.set(key, {
      refs: 1,
      deviceId: device.deviceId,
      memory,
      device,
      offset: 0,
      release: () => memory.close(),
    });
    hostTransfers.record(this.#model, { onDevice: device.byteSize });
    return {
      handle: Buffer.from(memory.ipcHandle).toString("base64"),
      offset: 0,
      deviceId: device.deviceId,
      byteSize: device.byteSize,
      key,
    };
  }

  /** Loans given back (by the stub, or by what here borrowed them back). */
  drop(keys: readonly number[]): void {
    for (const key of keys) {
      const loan = this.#lent.get(key);
      if (!loan || --loan.refs > 0) continue;
      this.#lent.delete(key);
      loan.release();
    }
  }

  /** How many loans the stub holds (tests, the GPU check). */
  get lent(): number {
    return this.#lent.size;
  }

  /** How many of the stub's allocations are mapped here (in use or idle). */
  get opened(): number {
    return this.#opened.size;
  }

  /**
   * A tensor the stub sends back on its GPU (a model's output, a BLS input) as a device tensor here,
   * its memory mapped once per allocation: `pointer` for code that runs on it in place (a libtorch
   * model's input), `copyTo` for one device-to-device copy (a client's CUDA region, memory lent to
   * another stub), `ipc` for another stub to open it, and its bytes on the host once when asked
   * (`toHost`, counted). `giveBack` tells the stub (once) that the server is done with its memory.
   * A tensor over one of our own loans (`wire.server`) keeps that loan until it is released.
   */
  async map(wire: IpcTensor, giveBack: (key: number) => void): Promise<DeviceTensor> {
    let event: Uint8Array | undefined;
    try {
      event = eventOf(wire);
    } catch (error) {
      if (!wire.server) giveBack(wire.key);
      throw error;
    }
    if (wire.server) return this.#mapLoan(wire, event);
    const id = `${wire.deviceId}:${wire.handle}`;
    let memory: CudaMemory;
    try {
      memory = (await this.#open(wire)).memory;
    } catch (error) {
      giveBack(wire.key);
      throw error;
    }
    const written = this.#written(event, wire.deviceId);
    let host: Promise<Uint8Array> | undefined;
    const settle = new Settle();
    return {
      kind: "region",
      deviceId: wire.deviceId,
      byteSize: wire.byteSize,
      pointer: memory.pointer + BigInt(wire.offset),
      ipc: { handle: new Uint8Array(Buffer.from(wire.handle, "base64")), offset: wire.offset },
      ...(event ? { event } : {}),
      toHost: () => {
        host ??= written()
          .then(() => memory.read(wire.offset, wire.byteSize))
          .then((bytes) => {
            hostTransfers.record(this.#model, { deviceToHost: wire.byteSize });
            return bytes;
          });
        settle.add(host);
        return host;
      },
      copyTo: (target, room, deviceId) => {
        const copied = written().then(() =>
          memory.copyTo(wire.offset, target, Math.min(wire.byteSize, room), deviceId),
        );
        settle.add(copied);
        return copied;
      },
      settleAfter: (done) => settle.add(done),
      release: () =>
        settle.end(() => {
          this.#close(id);
          giveBack(wire.key);
        }),
    };
  }

  /** A wait for the writer's event before the host reads or copies its bytes (none: at once). */
  #written(event: Uint8Array | undefined, deviceId: number): () => Promise<void> {
    if (!event) return () => Promise.resolve();
    let waited: Promise<void> | undefined;
    return () => {
      waited ??= this.#api().then((api) => api.waitCudaIpcEvent(event, deviceId));
      return waited;
    };
  }

  /** One of our own loans sent back (a model returning its input): held until released. */
  #mapLoan(wire: IpcTensor, event: Uint8Array | undefined): DeviceTensor {
    const loan = this.#lent.get(wire.key);
    if (!loan) throw new Error(`the Python stub returned device memory ${wire.key} the server does not hold`);
    loan.refs++;
    const memory = loan.memory;
    const delta = wire.offset - loan.offset;
    // The lent tensor itself (not a view of part of it): its own device copy serves.
    const whole = delta === 0 && wire.byteSize === loan.device.byteSize;
    const written = this.#written(event, wire.deviceId);
    let host: Promise<Uint8Array> | undefined;
    const settle = new Settle();
    const read = async (): Promise<Uint8Array> => {
      await written();
      if (!memory) {
        // Another process's memory lent as it was: the whole tensor comes back, or a part of it.
        const whole = await loan.device.toHost();
        return whole.subarray(delta, delta + wire.byteSize);
      }
      const bytes = await memory.read(wire.offset, wire.byteSize);
      hostTransfers.record(this.#model, { deviceToHost: wire.byteSize });
      return bytes;
    };
    const pointer = memory
      ? memory.pointer + BigInt(wire.offset)
      : loan.device.pointer !== undefined
        ? loan.device.pointer + BigInt(delta)
        : undefined;
    const handle = memory?.ipcHandle ?? loan.handle;
    const ipc = handle ? { handle, offset: wire.offset } : undefined;
    const copy = (run: () => Promise<void>): Promise<void> => {
      const copied = written().then(run);
      settle.add(copied);
      return copied;
    };
    return {
      kind: "region",
      deviceId: wire.deviceId,
      byteSize: wire.byteSize,
      ...(pointer !== undefined ? { pointer } : {}),
      ...(ipc ? { ipc } : {}),
      ...(event ? { event } : {}),
      toHost: () => {
        host ??= read();
        settle.add(host);
        return host;
      },
      ...(memory
        ? {
            copyTo: (target: bigint, room: number, deviceId?: number) =>
              copy(() => memory.copyTo(wire.offset, target, Math.min(wire.byteSize, room), deviceId)),
          }
        : whole && loan.device.copyTo
          ? {
              copyTo: (target: bigint, room: number, deviceId?: number) =>
                copy(() => loan.device.copyTo?.(target, room, deviceId) ?? Promise.resolve()),
            }
          : {}),
      settleAfter: (done) => settle.add(done),
      release: () => settle.end(() => this.drop([wire.key])),
    };
  }

  async #open(wire: IpcTensor): Promise<{ memory: CudaMemory; offset: number }> {
    const id = `${wire.deviceId}:${wire.handle}`;
    let entry = this.#opened.get(id);
    if (!entry) {
      const handle = new Uint8Array(Buffer.from(wire.handle, "base64"));
      const memory = this.#api().then((api) => api.openCudaIpcHandle(handle, wire.deviceId));
      entry = { memory, count: 0 };
      this.#opened.set(id, entry);
      memory.catch(() => {
        if (this.#opened.get(id)?.memory === memory) this.#opened.delete(id);
      });
    }
    entry.count++;
    return { memory: await entry.memory, offset: wire.offset };
  }

  #close(id: string): void {
    const entry = this.#opened.get(id);
    if (!entry || --entry.count > 0) return;
    // Kept mapped, most recently used last; the oldest idle one beyond the limit is closed.
    this.#opened.delete(id);
    this.#opened.set(id, entry);
    let idle = 0;
    for (const e of this.#opened.values()) if (e.count === 0) idle++;
    for (const [other, e] of this.#opened) {
      if (idle <= IDLE_MAPPINGS) break;
      if (e.count > 0) continue;
      this.#opened.delete(other);
      idle--;
      void e.memory.then(
        (memory) => memory.close(),
        () => {},
      );
    }
  }

  /** The stub is gone: every loan ends, every mapping of its memory closes. */
  close(): void {
    this.#closed = true;
    this.#peers.delete(this);
    for (const loan of this.#lent.values()) loan.release();
    this.#lent.clear();
    for (const entry of this.#opened.values())
      void entry.memory.then(
        (memory) => memory.close(),
        () => {},
      );
    this.#opened.clear();
  }
}

/** The writer's event of a lent tensor, checked: 64 bytes of base64, or none. */
function eventOf(wire: IpcTensor): Uint8Array | undefined {
  if (wire.event === undefined) return undefined;
  const bytes = typeof wire.event === "string" ? Buffer.from(wire.event, "base64") : undefined;
  if (bytes?.byteLength !== 64) throw new Error("a CUDA IPC event handle must be 64 bytes (base64)");
  return new Uint8Array(bytes);
}

/**
 * What must end before lent memory is given back: its host copy, device copies from it, deferred
 * batches reading it in place. `end` runs `release` once, after all of them (settled either way).
 */
class Settle {
  #pending: Promise<unknown>[] = [];
  #ended = false;

  add(done: Promise<unknown>): void {
    this.#pending.push(done);
  }

  end(release: () => void): void {
    if (this.#ended) return;
    this.#ended = true;
    if (this.#pending.length === 0) release();
    else void Promise.allSettled(this.#pending).then(release);
  }
}
