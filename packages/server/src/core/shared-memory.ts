import { constants } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { join } from "node:path";
import { InferenceError } from "../base/errors.js";
import { hostTransfers } from "../base/host-transfers.js";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Logger } from "../base/log.js";
import type { SharedMemoryRef } from "../base/tensor.js";

/** A registered system shared-memory region, as the status APIs report it. */
export interface SharedMemoryRegionStatus {
  name: string;
  key: string;
  offset: number;
  byteSize: number;
}

/** A registered CUDA shared-memory region, as the status APIs report it. */
export interface CudaSharedMemoryRegionStatus {
  name: string;
  deviceId: number;
  byteSize: number;
}

/** Which kind of memory holds a region (Triton's `TRITONSERVER_MEMORY_CPU` / `_GPU`). */
export type SharedMemoryKind = "system" | "cuda";

/**
 * Device memory opened from a client's CUDA IPC handle (the native addon's `CudaMemory`): copies
 * to and from host buffers, and the device address for code that runs on it in place.
 */
export interface CudaRegionMemory {
  /** Bytes from `pointer` to the end of the client's allocation. */
  readonly byteSize: number;
  readonly pointer: bigint;
  read(offset: number, length: number): Promise<Uint8Array>;
  write(offset: number, data: Uint8Array): Promise<void>;
  /**
   * Copy `length` bytes from `offset` to device memory at `target` on the region's GPU, or on GPU
   * `targetDevice` (one device-to-device copy); absent where the memory cannot.
   */
  copyTo?(offset: number, target: bigint, length: number, targetDevice?: number): Promise<void>;
  close(): void;
}

/** How the manager reaches CUDA (the server passes the GPU probe and the addon's IPC open). */
export interface CudaIpc {
  /** The GPU ids this process may use; none means Triton's answers of a build without GPUs. */
  gpus(): Promise<readonly number[]>;
  /** Open a 64-byte `cudaIpcMemHandle_t` on `device` (`cuIpcOpenMemHandle`). */
  open(handle: Uint8Array, device: number): Promise<CudaRegionMemory>;
  /** Where the driver's detailed errors go (clients get Triton's generic text). */
  log?: Logger;
}

/** Where a CUDA region's tensor lives on its device, for a backend that reads or writes it in place. */
export interface DeviceLocation {
  deviceId: number;
  /** The device address of the tensor's first byte in this process. */
  pointer: bigint;
  byteSize: number;
  /**
   * The client's CUDA IPC handle of the region's allocation and the tensor's offset in it: another
   * process (a Python stub) opens the same memory with it, without a copy.
   */
  ipc?: { handle: Uint8Array; offset: number };
  /**
   * Copy the tensor's bytes to device memory at `pointer` on its GPU or on GPU `deviceId`, device to
   * device (a model on another GPU); absent where the region's memory cannot.
   */
  copyTo?(pointer: bigint, deviceId?: number): Promise<void>;
}

/** `sizeof(cudaIpcMemHandle_t)`. */
export const CUDA_IPC_HANDLE_BYTES = 64;

/**
 * A registered region of either kind. Positions are relative to the region's start; the range is
 * checked before they are called.
 */
interface Region {
  readonly kind: SharedMemoryKind;
  readonly name: string;
  readonly byteSize: number;
  /**
   * Requests using it right now (an inference that names it, from its start to its response; a
   * read or write; a device tensor held in place): an unregister leaves it listed until they end.
   */
  users: number;
  /** Unregistered while in use: closed and forgotten when its last user ends. */
  unregistered?: boolean;
  read(position: number, length: number): Promise<Uint8Array>;
  write(position: number, data: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

/** A POSIX shared-memory object, read and written through its file (one copy each, off the event loop). */
class SystemRegion implements Region {
  readonly kind = "system";
  users = 0;
  unregistered?: boolean;

  constructor(
    readonly name: string,
    readonly key: string,
    readonly offset: number,
    readonly byteSize: number,
    readonly handle: FileHandle,
  ) {}

  async read(position: number, length: number): Promise<Uint8Array> {
    const out = new Uint8Array(length);
    const { bytesRead } = await this.handle.read(out, 0, length, this.offset + position);
    if (bytesRead !== length) throw new InferenceError("SHM_BAD_RANGE", { name: this.name });
    return out;
  }

  async write(position: number, data: Uint8Array): Promise<void> {
    await this.handle.write(data, 0, data.byteLength, this.offset + position);
  }

  close(): Promise<void> {
    return this.handle.close();
  }
}

/** Device memory a client shared with a CUDA IPC handle: one device↔host copy per tensor. */
class CudaRegion implements Region {
  readonly kind = "cuda";
  users = 0;
  unregistered?: boolean;

  constructor(
    readonly name: string,
    readonly deviceId: number,
    readonly byteSize: number,
    readonly memory: CudaRegionMemory,
    /** The client's handle (64 bytes), for another process to open the same memory. */
    readonly handle?: Uint8Array,
  ) {}

  read(position: number, length: number): Promise<Uint8Array> {
    return this.memory.read(position, length);
  }

  write(position: number, data: Uint8Array): Promise<void> {
    return this.memory.write(position, data);
  }

  async close(): Promise<void> {
    try {
      this.memory.close();
    } catch (error) {
      throw new InferenceError("CUDA_SHM_CLOSE_FAILED", { detail: (error as Error).message });
    }
  }
}

/** POSIX shared-memory objects are files here (`shm_open("/key")` opens `/dev/shm/key`). */
const SHM_ROOT = "/dev/shm";

/** Keys Triton keeps for its Python backend's own regions (`kTritonSharedMemoryRegionPrefix`). */
const RESERVED_PREFIX = "triton_python_backend_shm_region_";

const SIZE_MAX = 2n ** 64n - 1n;

/** A wire value as Triton's `size_t`: a negative int64 wraps, as the C++ cast does. */
function sizeT(value: number): bigint {
  if (!Number.isFinite(value)) return SIZE_MAX;
  const n = BigInt(Math.trunc(value));
  return n > SIZE_MAX ? SIZE_MAX : BigInt.asUintN(64, n);
}

/**
 * Triton's three checks of a tensor's place in a region (`GetMemoryInfo`), in its order: the
 * offset inside the region, offset + byte size within 64 bits, and the end inside the region.
 */
function checkRange(ref: SharedMemoryRef, regionSize: number): void {
  const offset = sizeT(ref.offset);
  const byteSize = sizeT(ref.byteSize);
  if (offset >= BigInt(regionSize)) throw new InferenceError("SHM_BAD_OFFSET", { name: ref.region });
  if (byteSize > SIZE_MAX - offset) {
    throw new InferenceError("SHM_OVERFLOW", { byteSize, offset, max: SIZE_MAX, name: ref.region });
  }
  if (offset + byteSize > BigInt(regionSize)) throw new InferenceError("SHM_BAD_RANGE", { name: ref.region });
}

/** What {@link SharedMemoryManager.hold} returns when a request names no registered region. */
const NOTHING_HELD = () => {};

/**
 * Triton's system and CUDA shared-memory extensions: regions clients register by name (one
 * namespace for both kinds, as in Triton), that inputs are read from and outputs written into.
 * Off unless `--allow-client-shm=true`, as in Triton.
 *
 * A system region is read and written through its file (one copy each, off the event loop, into a
 * buffer the request owns); the native addon's mmap can replace this with views of the mapping. A
 * CUDA region is device memory opened from the client's IPC handle: inputs are copied to the host
 * once (so every backend can use them) and outputs copied to the device once;
 * {@link SharedMemoryManager.deviceLocation} gives a backend the device address instead.
 *
 * Without `cuda`, or where it finds no GPU, the CUDA endpoints answer as a tritonserver built
 * without GPUs: no regions, registration refused, unregistration a no-op.
 */
export class SharedMemoryManager {
  readonly #regions = new Map<string, Region>();
  readonly #cuda: CudaIpc | undefined;

  constructor(
    readonly allowed: boolean,
    cuda?: CudaIpc,
  ) {
    this.#cuda = cuda;
  }

  /** Whether CUDA regions can be registered here: a GPU was found (false without `cuda`). */
  async cudaAvailable(): Promise<boolean> {
    return ((await this.#cuda?.gpus())?.length ?? 0) > 0;
  }

  #check(): void {
    if (!this.allowed) throw new InferenceError("SHM_DISABLED");
  }

  /**
   * Register `byteSize` bytes at `offset` of the POSIX shared-memory object `key` as region `name`.
   *
   * @throws {@link InferenceError} with Triton's message: a key under the prefix Triton keeps for
   * its Python backend, a name already registered, an object that cannot be opened, a range past
   * the object's end.
   */
  async register(name: string, key: string, offset: number, byteSize: number): Promise<void> {
    this.#check();
    if (name === "") throw new InferenceError("SHM_REGION_NAME_REQUIRED", { kind: "system" });
    // shm_open skips every leading slash, so Triton looks for the prefix after them too.
    const object = key.replace(/^\/+/, "");
    // Triton refuses a key of slashes only (or none) first, naming the region.
    if (object === "") throw new InferenceError("SHM_EMPTY_KEY", { name, key });
    if (object.startsWith(RESERVED_PREFIX)) {
      throw new InferenceError("SHM_RESERVED_KEY", { name, key, prefix: RESERVED_PREFIX });
    }
    if (this.#regions.has(name)) throw new InferenceError("SHM_EXISTS", { name });
    // One name, as shm_open takes it (it fails on anything else): nothing may escape /dev/shm.
    if (object.includes("/") || object.includes("\0") || object === "." || object === "..") {
      throw new InferenceError("SHM_INVALID_KEY", { key: key.replaceAll("\0", "\\0") });
    }
    let handle: FileHandle;
    try {
      handle = await open(join(SHM_ROOT, object), constants.O_RDWR | constants.O_NOFOLLOW);
    } catch {
      throw new InferenceError("SHM_OPEN_FAILED", { key });
    }
    const size = (await handle.stat()).size;
    const valid = Number.isSafeInteger(offset) && offset >= 0 && Number.isSafeInteger(byteSize) && byteSize >= 0;
    if (!valid || offset + byteSize > size) {
      await handle.close();
      throw new InferenceError("SHM_REGISTER_INVALID", { name });
    }
    // A concurrent registration of the same name may have won while the file was opening.
    if (this.#regions.has(name)) {
      await handle.close();
      throw new InferenceError("SHM_EXISTS", { name });
    }
    this.#regions.set(name, new SystemRegion(name, key, offset, byteSize, handle));
  }

  /**
   * Register the device memory behind a client's CUDA IPC handle as region `name`, in Triton's
   * order: the name, the handle opened on `deviceId`, then `byteSize` within the client's
   * allocation. `deviceId` and `byteSize` are taken as sent (uint64 on HTTP, int64/uint64 on gRPC).
   *
   * @throws {@link InferenceError} with Triton's message: no GPU here (`GPUs not supported`),
   * client shared memory disabled, a name already registered, a handle that does not open on that
   * device (`failed to register shared memory region: invalid args`, the driver's reason logged),
   * a byte size past the allocation.
   */
  async registerCuda(name: string, handle: Uint8Array, deviceId: bigint, byteSize: bigint): Promise<void> {
    const gpus = (await this.#cuda?.gpus()) ?? [];
    if (!this.#cuda || gpus.length === 0) throw new InferenceError("CUDA_SHM_NOT_SUPPORTED", { name });
    this.#check();
    if (name === "") throw new InferenceError("SHM_REGION_NAME_REQUIRED", { kind: "cuda" });
    if (this.#regions.has(name)) throw new InferenceError("SHM_EXISTS", { name });
    const log = this.#cuda.log;
    const refuse = (why: string) => {
      log?.error(`failed to open CUDA IPC handle for region '${name}': ${why}`);
      return new InferenceError("CUDA_SHM_OPEN_FAILED");
    };
    if (handle.byteLength !== CUDA_IPC_HANDLE_BYTES) {
      throw refuse(`the handle is ${handle.byteLength} bytes, not ${CUDA_IPC_HANDLE_BYTES}`);
    }
    if (!gpus.includes(Number(deviceId))) throw refuse(`device ${deviceId} is not one of this server's GPUs`);
    let memory: CudaRegionMemory;
    try {
      memory = await this.#cuda.open(handle, Number(deviceId));
    } catch (error) {
      throw refuse((error as Error).message);
    }
    const fail = (id: "SHM_REGISTER_INVALID" | "SHM_EXISTS") => {
      try {
        memory.close();
      } catch (error) {
        log?.error(`failed to close CUDA IPC handle for region '${name}': ${(error as Error).message}`);
      }
      return new InferenceError(id, { name });
    };
    if (byteSize < 0n || byteSize > BigInt(memory.byteSize)) throw fail("SHM_REGISTER_INVALID");
    // A concurrent registration of the same name may have won while the handle was opening.
    if (this.#regions.has(name)) throw fail("SHM_EXISTS");
    this.#regions.set(name, new CudaRegion(name, Number(deviceId), Number(byteSize), memory, new Uint8Array(handle)));
  }

  /**
   * Unregister one region of `kind`, or all of that kind when `name` is empty (a region of the
   * other kind is left alone, as in Triton). CUDA unregistration without a GPU succeeds.
   */
  async unregister(name: string, kind: SharedMemoryKind = "system"): Promise<void> {
    if (kind === "cuda" && !(await this.cudaAvailable())) return;
    this.#check();
    const names = name === "" ? [...this.#regions.keys()] : [name];
    await Promise.all(
      names.map(async (n) => {
        const region = this.#regions.get(n);
        // Triton succeeds on an unknown name.
        if (!region || region.kind !== kind) return;
        if (region.users > 0) {
          // As Triton: the region stays registered (and listed) until the requests using it end.
          region.unregistered = true;
          this.#cuda?.log?.verbose(
            1,
            `Shared memory region '${n}' will be unregistered after in-flight requests complete.`,
          );
          return;
        }
        this.#regions.delete(n);
        await region.close();
      }),
    );
  }

  /**
   * Hold the regions a request names (its inputs' and outputs' `shared_memory_region`) from its
   * start until the returned function is called, as Triton's requests hold theirs: unregistering
   * one meanwhile leaves it listed and usable until then. Names not registered are skipped (the
   * request fails on them when it reads or writes).
   */
  hold(names: Iterable<string>): () => void {
    const held: Region[] = [];
    for (const name of new Set(names)) {
      const region = this.#regions.get(name);
      if (!region) continue;
      region.users++;
      held.push(region);
    }
    if (held.length === 0) return NOTHING_HELD;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const region of held) this.#release(region);
    };
  }

  /** {@link hold} the regions a request's inputs and outputs name (nothing to do for most requests). */
  holdFor(request: InferenceRequest): () => void {
    if (this.#regions.size === 0) return NOTHING_HELD;
    const names: string[] = [];
    for (const input of request.inputs) {
      if (input.sharedMemory) names.push(input.sharedMemory.region);
    }
    for (const output of request.outputs) {
      const region = output.parameters.shared_memory_region;
      if (typeof region === "string") names.push(region);
    }
    return names.length > 0 ? this.hold(names) : NOTHING_HELD;
  }

  /** One user of `region` ended: an unregistered region goes with its last. */
  #release(region: Region): void {
    region.users--;
    if (region.users > 0 || !region.unregistered) return;
    if (this.#regions.get(region.name) === region) this.#regions.delete(region.name);
    region.close().catch((error: unknown) => {
      this.#cuda?.log?.error(`failed to close shared memory region '${region.name}': ${(error as Error).message}`);
    });
  }

  #named(name: string, kind: SharedMemoryKind): Region[] {
    if (name === "") return [...this.#regions.values()].filter((r) => r.kind === kind);
    const named = this.#regions.get(name);
    if (!named)
      throw new InferenceError(kind === "cuda" ? "CUDA_SHM_STATUS_NOT_FOUND" : "SHM_STATUS_NOT_FOUND", { name });
    if (named.kind !== kind) {
      throw new InferenceError(named.kind === "cuda" ? "SHM_REGISTERED_AS_CUDA" : "SHM_REGISTERED_AS_SYSTEM", { name });
    }
    return [named];
  }

  /** The registered system regions (all of them, or the one named). */
  status(name: string): SharedMemoryRegionStatus[] {
    return this.#named(name, "system").map((r) => {
      const { key, offset, byteSize } = r as SystemRegion;
      return { name: r.name, key, offset, byteSize };
    });
  }

  /** The registered CUDA regions (all of them, or the one named). */
  cudaStatus(name: string): CudaSharedMemoryRegionStatus[] {
    return this.#named(name, "cuda").map((r) => ({
      name: r.name,
      deviceId: (r as CudaRegion).deviceId,
      byteSize: r.byteSize,
    }));
  }

  /**
   * Where a tensor in a CUDA region lives on its device (checked as a read is), or undefined for
   * a system region: lets a backend run on the client's memory without a host copy. The address
   * stays valid while the region is registered.
   */
  deviceLocation(ref: SharedMemoryRef): DeviceLocation | undefined {
    this.#check();
    const region = this.#region(ref.region);
    checkRange(ref, region.byteSize);
    if (!(region instanceof CudaRegion)) return undefined;
    const memory = region.memory;
    const copy = memory.copyTo;
    return {
      deviceId: region.deviceId,
      pointer: memory.pointer + BigInt(ref.offset),
      byteSize: ref.byteSize,
      ...(region.handle ? { ipc: { handle: region.handle, offset: ref.offset } } : {}),
      ...(copy
        ? {
            copyTo: (pointer: bigint, deviceId?: number) =>
              copy.call(memory, ref.offset, pointer, ref.byteSize, deviceId),
          }
        : {}),
    };
  }

  /**
   * A tensor in a CUDA region, held for a backend that runs on it in place: the region stays
   * registered (an unregister waits) until `release()`. Checked as a read is; undefined for a
   * system region. `release` is idempotent.
   */
  holdDevice(ref: SharedMemoryRef): { location: DeviceLocation; release: () => void } | undefined {
    const location = this.deviceLocation(ref);
    if (!location) return undefined;
    const region = this.#region(ref.region);
    region.users++;
    let held = true;
    return {
      location,
      release: () => {
        if (!held) return;
        held = false;
        this.#release(region);
      },
    };
  }

  #region(name: string): Region {
    const region = this.#regions.get(name);
    if (!region) throw new InferenceError("SHM_NOT_FOUND", { name });
    return region;
  }

  async #use<T>(ref: SharedMemoryRef, work: (region: Region, position: number) => Promise<T>): Promise<T> {
    this.#check();
    const region = this.#region(ref.region);
    checkRange(ref, region.byteSize);
    region.users++;
    try {
      return await work(region, ref.offset);
    } finally {
      this.#release(region);
    }
  }

  /**
   * A tensor's bytes from a region, into a buffer of their own (from a CUDA region: one
   * device-to-host copy, counted for `model` in `hostTransfers`).
   */
  read(ref: SharedMemoryRef, model = ""): Promise<Uint8Array> {
    return this.#use(ref, async (region, position) => {
      const data = await region.read(position, ref.byteSize);
      if (region.kind === "cuda") hostTransfers.record(model, { deviceToHost: data.byteLength });
      return data;
    });
  }

  /** Write an output's bytes into a region (into a CUDA region: one host-to-device copy, counted for `model`). */
  write(ref: SharedMemoryRef, data: Uint8Array, model = ""): Promise<void> {
    return this.#use(ref, async (region, position) => {
      await region.write(position, data);
      if (region.kind === "cuda") hostTransfers.record(model, { hostToDevice: data.byteLength });
    });
  }

  /** Close every region of both kinds (at shutdown). */
  async close(): Promise<void> {
    const regions = [...this.#regions.values()];
    this.#regions.clear();
    await Promise.all(regions.map((r) => r.close().catch(() => undefined)));
  }
}

export type { SharedMemoryRef };
