import { closeSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from "node:fs";
import type { Logger } from "../../base/log.js";

/**
 * One shared-memory file (under /dev/shm) as the server reaches it: mapped (the native addon, no
 * copy on our side of a write or a read) or through its file descriptor (one copy, `fs`).
 */
export interface MappedSegment {
  readonly byteLength: number;
  /** Copy `data` into the segment at `offset`. */
  write(offset: number, data: Uint8Array): void;
  /** A fresh copy of `length` bytes at `offset` (the owner reuses the space afterwards). */
  read(offset: number, length: number): Uint8Array;
  /**
   * The `length` bytes at `offset`, without a copy, over a mapping of their own (so that every
   * view derived from them holds that mapping's ArrayBuffer, and nothing else does); undefined
   * where this segment cannot do that (no addon). The caller keeps the bytes unchanged until that
   * ArrayBuffer is garbage-collected.
   */
  lend?(offset: number, length: number): Uint8Array | undefined;
  close(): void;
}

/** How segments are reached: created (the server's own) or opened (the stub's). */
export interface SegmentMapper {
  /** `mapped`: the addon's mmap; `file`: read and write through the descriptor. */
  readonly kind: "mapped" | "file";
  create(path: string, byteLength: number): MappedSegment;
  open(path: string, byteLength: number): MappedSegment;
}

/** The addon's API (`@galley/backends-native`), as far as this module uses it. */
interface NativeShm {
  mapSharedMemory(
    path: string,
    byteLength: number,
    options?: { offset?: number; create?: boolean },
  ): { buffer: ArrayBuffer; byteLength: number; close(): void };
  sharedMemoryMapping?(): { available: boolean; reason?: string };
}

/** Segments through their file descriptor: `pwrite` / `pread`, one copy each way. */
export const fileMapper: SegmentMapper = {
  kind: "file",
  create(path, byteLength) {
    const fd = openSync(path, "wx+", 0o600);
    try {
      ftruncateSync(fd, byteLength);
    } catch (error) {
      closeSync(fd);
      unlinkSync(path);
      throw error;
    }
    return fileSegment(fd, byteLength);
  },
  open(path, byteLength) {
    return fileSegment(openSync(path, "r+"), byteLength);
  },
};

function fileSegment(fd: number, byteLength: number): MappedSegment {
  let open = true;
  return {
    byteLength,
    write(offset, data) {
      for (let done = 0; done < data.byteLength; ) {
        done += writeSync(fd, data, done, data.byteLength - done, offset + done);
      }
    },
    read(offset, length) {
      const out = Buffer.allocUnsafeSlow(length);
      for (let done = 0; done < length; ) {
        const n = readSync(fd, out, done, length - done, offset + done);
        if (n <= 0) throw new Error(`shared memory ends before ${offset + length} bytes`);
        done += n;
      }
      return out;
    },
    close() {
      if (open) closeSync(fd);
      open = false;
    },
  };
}

function nativeMapper(native: NativeShm): SegmentMapper {
  const map = (path: string, byteLength: number, create: boolean): MappedSegment => {
    const mapping = native.mapSharedMemory(path, byteLength, { create });
    const bytes = new Uint8Array(mapping.buffer, 0, byteLength);
    let open = true;
    // Kept open so that blocks can be lent after the file is unlinked (/proc/self/fd reopens it).
    let fd = -1;
    try {
      fd = openSync(path, "r");
    } catch {
      // no lending from this segment
    }
    return {
      byteLength,
      write(offset, data) {
        bytes.set(data, offset);
      },
      read(offset, length) {
        // slice: one allocation and copy (faster than allocating and then setting).
        return bytes.slice(offset, offset + length);
      },
      lend(offset, length) {
        if (!open || fd < 0) return undefined;
        try {
          const lent = native.mapSharedMemory(`/proc/self/fd/${fd}`, length, { offset });
          return new Uint8Array(lent.buffer, 0, length);
        } catch {
          closeSync(fd);
          fd = -1;
          return undefined;
        }
      },
      close() {
        if (open) mapping.close();
        if (fd >= 0) closeSync(fd);
        fd = -1;
        open = false;
      },
    };
  };
  return {
    kind: "mapped",
    create: (path, byteLength) => map(path, byteLength, true),
    open: (path, byteLength) => map(path, byteLength, false),
  };
}

let chosen: Promise<SegmentMapper> | undefined;

/**
 * The addon's mapping when `@galley/backends-native` has it, else {@link fileMapper}; the
 * fallback is logged once per process.
 */
export function segmentMapper(log: Logger): Promise<SegmentMapper> {
  chosen ??= (async () => {
    let reason: string;
    try {
      // A variable specifier: the server builds and runs without the addon package.
      const name = "@galley/backends-native";
      const native = (await import(name)) as Partial<NativeShm>;
      const status = native.sharedMemoryMapping?.();
      if (typeof native.mapSharedMemory === "function" && (status?.available ?? true)) {
        return nativeMapper(native as NativeShm);
      }
      reason = status?.reason ?? "this build of @galley/backends-native has no mapSharedMemory";
    } catch (error) {
      reason = (error as Error).message;
    }
    log.info(`python backend: tensors cross shared memory with one copy through /dev/shm files (${reason})`);
    return fileMapper;
  })();
  return chosen;
}
