import { constants } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { join } from "node:path";
import { InferenceError } from "./errors.js";

/** A registered system shared-memory region, as the status APIs report it. */
export interface SharedMemoryRegionStatus {
  name: string;
  key: string;
  offset: number;
  byteSize: number;
}

/** Where a tensor lives in a registered region (the `shared_memory_*` parameters). */
export interface SharedMemoryRef {
  region: string;
  offset: number;
  byteSize: number;
}

interface Region extends SharedMemoryRegionStatus {
  handle: FileHandle;
  /** Requests reading or writing it right now: unregistering waits for them. */
  users: number;
  idle?: () => void;
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

/**
 * Triton's system shared-memory extension: regions clients register by name, that inputs are
 * read from and outputs written into. Off unless `--allow-client-shm=true`, as in Triton.
 *
 * Reads and writes go through the region's file (one copy each, off the event loop, into a buffer
 * the request owns); the native addon's mmap can replace this with views of the mapping.
 */
export class SharedMemoryManager {
  readonly #regions = new Map<string, Region>();

  constructor(readonly allowed: boolean) {}

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
    if (object.startsWith(RESERVED_PREFIX)) {
      throw new InferenceError("SHM_RESERVED_KEY", { name, key, prefix: RESERVED_PREFIX });
    }
    if (this.#regions.has(name)) throw new InferenceError("SHM_EXISTS", { name });
    // One name, as shm_open takes it (it fails on anything else): nothing may escape /dev/shm.
    if (object === "" || object.includes("/") || object.includes("\0") || object === "." || object === "..") {
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
    this.#regions.set(name, { name, key, offset, byteSize, handle, users: 0 });
  }

  /** Unregister one region, or all of them when `name` is empty. */
  async unregister(name: string): Promise<void> {
    this.#check();
    const names = name === "" ? [...this.#regions.keys()] : [name];
    await Promise.all(
      names.map(async (n) => {
        const region = this.#regions.get(n);
        // Triton succeeds on an unknown name.
        if (!region) return;
        this.#regions.delete(n);
        if (region.users > 0) await new Promise<void>((resolve) => (region.idle = resolve));
        await region.handle.close();
      }),
    );
  }

  /** The registered regions (all of them, or the one named). */
  status(name: string): SharedMemoryRegionStatus[] {
    const named = this.#regions.get(name);
    if (name !== "" && !named) throw new InferenceError("SHM_STATUS_NOT_FOUND", { name });
    const pick = named ? [named] : [...this.#regions.values()];
    return pick.map(({ name: n, key, offset, byteSize }) => ({ name: n, key, offset, byteSize }));
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
      return await work(region, region.offset + ref.offset);
    } finally {
      region.users--;
      if (region.users === 0) region.idle?.();
    }
  }

  /** A tensor's bytes from a region, into a buffer of their own. */
  read(ref: SharedMemoryRef): Promise<Uint8Array> {
    return this.#use(ref, async (region, position) => {
      const out = new Uint8Array(ref.byteSize);
      const { bytesRead } = await region.handle.read(out, 0, ref.byteSize, position);
      if (bytesRead !== ref.byteSize) throw new InferenceError("SHM_BAD_RANGE", { name: ref.region });
      return out;
    });
  }

  /** Write an output's bytes into a region. */
  write(ref: SharedMemoryRef, data: Uint8Array): Promise<void> {
    return this.#use(ref, async (region, position) => {
      await region.handle.write(data, 0, data.byteLength, position);
    });
  }

  /** Close every region (at shutdown). */
  async close(): Promise<void> {
    const regions = [...this.#regions.values()];
    this.#regions.clear();
    await Promise.all(regions.map((r) => r.handle.close().catch(() => undefined)));
  }
}
