// System (POSIX) shared memory for Triton's shared-memory extension: a region is a file in
// /dev/shm that the client writes inputs into and reads outputs from, and that the server maps
// once it is registered. Regions are named so that two processes cannot collide, and are removed
// on dispose, on `await using` scope exit and when the process exits, so they cannot leak.
import { randomBytes } from "node:crypto";
import { unlinkSync } from "node:fs";
import { type FileHandle, open, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { InferenceClient } from "./client-types.js";
import { SharedRegion } from "./shared-region.js";

/** Where POSIX shared-memory objects live on Linux (`shm_open("/name")` is `/dev/shm/name`). */
export const SHM_ROOT = "/dev/shm";

/** The bytes of one region. File-backed today; the native addon's mmap can make it zero-copy. */
export interface RegionMemory {
  read(offset: number, length: number): Promise<Uint8Array>;
  write(offset: number, bytes: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

/** Creates region memory for a key (`/name`); the default backs it with a file in {@link SHM_ROOT}. */
export interface RegionStore {
  create(key: string, byteSize: number): Promise<RegionMemory>;
  remove(key: string): Promise<void>;
  /** Synchronous removal, for process exit. */
  removeSync(key: string): void;
}

function pathOf(key: string): string {
  return join(SHM_ROOT, key.replace(/^\//, ""));
}

/** POSIX shared memory through /dev/shm files: reads and writes are copies through the page cache. */
export const fileRegionStore: RegionStore = {
  async create(key, byteSize) {
    // O_EXCL: an existing object is never reused or clobbered.
    const handle: FileHandle = await open(pathOf(key), "wx+", 0o600);
    try {
      await handle.truncate(byteSize);
    } catch (error) {
      await handle.close();
      await unlink(pathOf(key)).catch(() => undefined);
      throw error;
    }
    return {
      async read(offset, length) {
        const out = new Uint8Array(length);
        const { bytesRead } = await handle.read(out, 0, length, offset);
        return bytesRead === length ? out : out.subarray(0, bytesRead);
      },
      async write(offset, bytes) {
        await handle.write(bytes, 0, bytes.byteLength, offset);
      },
      close: () => handle.close(),
    };
  },
  remove: (key) => unlink(pathOf(key)),
  removeSync: (key) => unlinkSync(pathOf(key)),
};

const live = new Map<string, RegionStore>();
let exitHooked = false;

/** Remove every region still alive when the process exits (normally, or on SIGINT/SIGTERM). */
function hookExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  const cleanup = () => {
    for (const [key, store] of live) {
      try {
        store.removeSync(key);
      } catch {
        // Already gone.
      }
    }
    live.clear();
  };
  process.once("exit", cleanup);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    const onSignal = () => {
      cleanup();
      // Only when nothing else handles the signal: then re-raise it for the default behaviour.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    if (process.listenerCount(signal) === 0) process.once(signal, onSignal);
  }
}

/** Options for {@link SystemSharedMemory.create}. */
export interface SharedMemoryOptions {
  /** Register the region with this client's server (and unregister it on dispose). */
  client?: InferenceClient;
  /** The registration name; default a unique name derived from the key. */
  name?: string;
  /** Where the region's memory comes from; default {@link fileRegionStore}. */
  store?: RegionStore;
}

/**
 * A system shared-memory region, created, optionally registered, and removed on dispose.
 *
 * @example
 * await using region = await SystemSharedMemory.create(128, { client });
 * await region.write(0, tensor.int32([1, 16], a).data);
 * await region.write(64, tensor.int32([1, 16], b).data);
 * const result = await client.infer("simple", {
 *   inputs: { INPUT0: region.input("INT32", [1, 16], 0, 64), INPUT1: region.input("INT32", [1, 16], 64, 64) },
 *   outputs: [region.output("OUTPUT0", 0, 64)],
 * });
 * const sum = new Int32Array((await region.read(0, 64)).buffer);
 */
export class SystemSharedMemory extends SharedRegion implements AsyncDisposable {
  private constructor(
    name: string,
    /** The POSIX key (`/galley-<pid>-<random>`). */
    readonly key: string,
    byteSize: number,
    readonly memory: RegionMemory,
    readonly store: RegionStore,
    readonly client: InferenceClient | undefined,
  ) {
    super(name, byteSize, "region", memory);
  }

  /** Create a region of `byteSize` bytes with a key no other process can be using. */
  static async create(byteSize: number, options: SharedMemoryOptions = {}): Promise<SystemSharedMemory> {
    if (!Number.isInteger(byteSize) || byteSize <= 0)
      throw new RangeError(`byteSize must be a positive integer, got ${byteSize}`);
    const store = options.store ?? fileRegionStore;
    hookExit();
    const key = `/galley-${process.pid}-${randomBytes(6).toString("hex")}`;
    const memory = await store.create(key, byteSize);
    live.set(key, store);
    const name = options.name ?? key.slice(1);
    const region = new SystemSharedMemory(name, key, byteSize, memory, store, options.client);
    if (options.client) {
      try {
        await options.client.registerSystemSharedMemory(name, key, byteSize);
      } catch (error) {
        await region.#release();
        throw error;
      }
    }
    return region;
  }

  /** Unregister (when registered through a client), close and remove the region. Idempotent. */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    try {
      if (this.client) await this.client.unregisterSystemSharedMemory(this.name).catch(() => undefined);
    } finally {
      await this.#release();
    }
  }

  async #release(): Promise<void> {
    this.markDisposed();
    live.delete(this.key);
    await this.memory.close().catch(() => undefined);
    await this.store.remove(this.key).catch(() => undefined);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}
