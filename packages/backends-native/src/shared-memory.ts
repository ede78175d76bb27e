import { loadBinding } from "./binding.js";

/** A POSIX shared-memory object (or any file) mapped into this process. */
export interface SharedMapping {
  /**
   * The mapped bytes (an external ArrayBuffer over the mapping; no copy): writes are seen by every
   * process that maps the same object. Detached (byteLength 0) after {@link SharedMapping.close}.
   */
  readonly buffer: ArrayBuffer;
  /** The length that was mapped; unchanged by close() (`buffer.byteLength` becomes 0). */
  readonly byteLength: number;
  /**
   * munmap now; idempotent. Views over `buffer` become detached/unusable (length 0); never a
   * crash. A mapping dropped without close() is unmapped when `buffer` is garbage-collected.
   */
  close(): void;
}

/** Options of {@link mapSharedMemory}. */
export interface MapSharedMemoryOptions {
  /** Where the mapping starts in the file, in bytes; any offset (page alignment is internal). Default 0. */
  offset?: number;
  /**
   * Create the file (O_CREAT|O_EXCL, mode 0600: it must not exist yet) and size it to
   * offset + byteLength. Default false: the file must exist and hold offset + byteLength bytes.
   */
  create?: boolean;
}

/**
 * Map `byteLength` bytes of the file at `path` (e.g. `/dev/shm/<name>`) read-write, MAP_SHARED,
 * from `offset`. Synchronous: open and mmap of a tmpfs file do not block.
 *
 * Throws an Error (`Unable to map shared memory '<path>': <why>`) when the addon is unavailable,
 * the file cannot be opened (or, with `create`, already exists), byteLength is 0, or the range is
 * beyond the file's size; never crashes.
 *
 * @example
 * const mapping = mapSharedMemory("/dev/shm/galley-example", 16, { create: true });
 * new Float32Array(mapping.buffer).set([1, 2, 3, 4]);
 * mapping.close();
 */
export function mapSharedMemory(path: string, byteLength: number, options: MapSharedMemoryOptions = {}): SharedMapping {
  const { offset = 0, create = false } = options;
  const fail = (why: string, cause?: unknown) =>
    new Error(`Unable to map shared memory '${path}': ${why}`, cause === undefined ? undefined : { cause });
  if (typeof path !== "string" || path === "" || path.includes("\0")) {
    throw fail("the path must be a non-empty string without NUL characters");
  }
  if (!Number.isSafeInteger(byteLength) || byteLength <= 0) {
    throw fail(`byteLength must be a positive integer, got ${String(byteLength)}`);
  }
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw fail(`offset must be a non-negative integer, got ${String(offset)}`);
  }
  let binding: ReturnType<typeof loadBinding>;
  try {
    binding = loadBinding();
  } catch (error) {
    throw fail((error as Error).message, error);
  }
  const { buffer, unmap } = binding.mapSharedMemory(path, byteLength, offset, Boolean(create));
  return Object.freeze({ buffer, byteLength, close: () => unmap(buffer) });
}

/** Whether {@link mapSharedMemory} can work in this process. */
export interface SharedMemoryMappingSupport {
  /** The native addon loaded, so mapping is available. */
  available: boolean;
  /** Why mapping is unavailable (the addon loader's message: what was tried, how to build it); empty when available. */
  reason: string;
}

/**
 * Whether the addon (and so {@link mapSharedMemory}) is available in this process, and why not.
 * Never throws; loads the addon on first call.
 *
 * @example
 * const shm = sharedMemoryMapping();
 * console.log(shm.available ? "zero-copy shared memory" : `copying: ${shm.reason}`);
 */
export function sharedMemoryMapping(): SharedMemoryMappingSupport {
  try {
    loadBinding();
    return { available: true, reason: "" };
  } catch (error) {
    return { available: false, reason: error instanceof Error ? error.message : String(error) };
  }
}
