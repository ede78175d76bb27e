import { readdirSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import type { ShmTensor } from "./python-messages.js";
import type { MappedSegment, SegmentMapper } from "./shm-mapping.js";

/** Where POSIX shared memory lives on Linux. */
export const SHM_DIR = "/dev/shm";
/** Triton's prefix for the Python backend's regions (refused to clients by the shared-memory API). */
export const SHM_PREFIX = "triton_python_backend_shm_region_";

const ALIGN = 64;
const MiB = 1024 * 1024;
/** The first segment's size; later ones double, or fit the largest tensor asked for. */
const FIRST_SEGMENT = 4 * MiB;

/** Below this, an output of the stub is copied: a mapping of its own costs more than the copy. */
const LEND_MIN = 256 * 1024;
/** The most bytes an instance lends at once; past it, outputs are copied until lent ones are collected. */
const LEND_MAX = 256 * MiB;

/**
 * First-fit allocation of aligned blocks in one segment. A block may be held by more than one
 * owner ({@link Arena.hold}); it is free once each has released it.
 */
export class Arena {
  /** Free ranges `[offset, length]`, by offset, coalesced. */
  readonly #free: [number, number][];
  readonly #used = new Map<number, number>();
  readonly #holds = new Map<number, number>();

  constructor(readonly size: number) {
    this.#free = [[0, size]];
  }

  get empty(): boolean {
    return this.#used.size === 0;
  }

  /** The offset of `length` free bytes, or -1. */
  alloc(length: number): number {
    const need = Math.max(ALIGN, Math.ceil(length / ALIGN) * ALIGN);
    const free = this.#free;
    for (let i = 0; i < free.length; i++) {
      const range = free[i] as [number, number];
      if (range[1] < need) continue;
      const offset = range[0];
      if (range[1] === need) free.splice(i, 1);
      else {
        range[0] = offset + need;
        range[1] -= need;
      }
      this.#used.set(offset, need);
      return offset;
    }
    return -1;
  }

  /** One more owner of the block at `offset`; false when there is none. */
  hold(offset: number): boolean {
    if (!this.#used.has(offset)) return false;
    this.#holds.set(offset, (this.#holds.get(offset) ?? 1) + 1);
    return true;
  }

  /** Give back the block at `offset` (freed when no other owner holds it); false when there is none. */
  release(offset: number): boolean {
    const length = this.#used.get(offset);
    if (length === undefined) return false;
    const holds = this.#holds.get(offset);
    if (holds !== undefined) {
      if (holds > 2) this.#holds.set(offset, holds - 1);
      else this.#holds.delete(offset);
      return true;
    }
    this.#used.delete(offset);
    let i = this.#free.findIndex(([o]) => o > offset);
    if (i < 0) i = this.#free.length;
    this.#free.splice(i, 0, [offset, length]);
    const next = this.#free[i + 1];
    if (next && offset + length === next[0]) {
      (this.#free[i] as [number, number])[1] += next[1];
      this.#free.splice(i + 1, 1);
    }
    const prev = this.#free[i - 1];
    const here = this.#free[i] as [number, number];
    if (prev && prev[0] + prev[1] === here[0]) {
      prev[1] += here[1];
      this.#free.splice(i, 1);
    }
    return true;
  }
}

/**
 * One instance's shared memory, seen from the server: its own segments (`<prefix>n<k>`), where
 * it writes the tensors it sends and the stub releases them when done, and the stub's segments
 * (`<prefix>p<k>`), opened on first use, read once and released. A segment's file is unlinked
 * as soon as both sides hold it, so nothing is left in /dev/shm if either process dies; whatever
 * a dead stub left is removed by {@link ShmPool.close}.
 *
 * Large tensors the stub answers with are lent, not copied, where the mapper can
 * ({@link MappedSegment.lend}): the response gets a view over a mapping of the block alone, and
 * the block goes back to its owner only once that mapping's ArrayBuffer is garbage-collected, so
 * it is never reused while a frontend, a cache or a later ensemble step can still read it.
 */
export class ShmPool {
  readonly #own: { segment: MappedSegment; arena: Arena }[] = [];
  readonly #peer = new Map<number, MappedSegment>();
  readonly #lent = new FinalizationRegistry<{ s: number; o: number; n: number; own: boolean }>((block) =>
    this.#returned(block),
  );
  #lentBytes = 0;
  #closed = false;

  /** `releasePeer`: the stub's block at `[segment, offset]` is no longer read by the server. */
  constructor(
    readonly prefix: string,
    readonly mapper: SegmentMapper,
    readonly releasePeer: (s: number, o: number) => void = () => undefined,
  ) {}

  /** Bytes lent and not yet collected. */
  get lentBytes(): number {
    return this.#lentBytes;
  }

  /** Copy a tensor's bytes into a block of the server's segments. */
  put(tensor: { name: string; datatype: string; shape: number[]; data: Uint8Array }): ShmTensor {
    const { name, datatype, shape, data } = tensor;
    const n = data.byteLength;
    if (n === 0) return { name, datatype, shape, s: -1, z: 0, o: 0, n };
    const [s, o] = this.#alloc(n);
    const { segment } = this.#own[s] as { segment: MappedSegment };
    segment.write(o, data);
    return { name, datatype, shape, s, z: segment.byteLength, o, n };
  }

  /** The stub released blocks of the server's segments. */
  release(blocks: readonly (readonly [number, number])[]): void {
    for (const [s, o] of blocks) this.#own[s]?.arena.release(o);
  }

  /**
   * The bytes of a tensor the stub sent: a copy, or a lent view (see the class), with `lent`
   * saying which. The stub's block is released through `releasePeer` once they are not read.
   */
  take(tensor: ShmTensor): { data: Uint8Array; lent: boolean } {
    if (tensor.s < 0 || tensor.n === 0) return { data: new Uint8Array(0), lent: false };
    const own = tensor.r === 1;
    let segment: MappedSegment | undefined;
    if (own) {
      // A view the stub made of one of our tensors: still in our block, which it has not released.
      segment = this.#own[tensor.s]?.segment;
      if (!segment || tensor.o + tensor.n > segment.byteLength)
        throw new Error(`a tensor of the stub lies outside segment ${tensor.s}`);
    } else {
      segment = this.#peerSegment(tensor);
      if (tensor.o + tensor.n > segment.byteLength) {
        throw new Error(`a tensor of the stub lies past the end of its segment ${tensor.s}`);
      }
    }
    const data = this.#lend(segment, tensor, own);
    if (data) return { data, lent: true };
    const copy = segment.read(tensor.o, tensor.n);
    if (!own) this.releasePeer(tensor.s, tensor.o);
    return { data: copy, lent: false };
  }

  #peerSegment(tensor: ShmTensor): MappedSegment {
    let segment = this.#peer.get(tensor.s);
    if (!segment) {
      const path = this.#path("p", tensor.s);
      segment = this.mapper.open(path, tensor.z);
      try {
        unlinkSync(path);
      } catch {
        // the stub removed it
      }
      this.#peer.set(tensor.s, segment);
    }
    return segment;
  }

  #lend(segment: MappedSegment, tensor: ShmTensor, own: boolean): Uint8Array | undefined {
    if (!segment.lend || tensor.n < LEND_MIN || this.#lentBytes + tensor.n > LEND_MAX) return undefined;
    // The stub's release of one of our blocks may come right after this answer: hold it first.
    if (own && !this.#own[tensor.s]?.arena.hold(tensor.o)) return undefined;
    const data = segment.lend(tensor.o, tensor.n);
    if (!data) {
      if (own) this.#own[tensor.s]?.arena.release(tensor.o);
      return undefined;
    }
    this.#lentBytes += tensor.n;
    this.#lent.register(data.buffer, { s: tensor.s, o: tensor.o, n: tensor.n, own });
    return data;
  }

  /** A lent block's mapping was collected: its owner may reuse it (unless this pool is gone). */
  #returned(block: { s: number; o: number; n: number; own: boolean }): void {
    if (this.#closed) return;
    this.#lentBytes -= block.n;
    if (block.own) this.#own[block.s]?.arena.release(block.o);
    else this.releasePeer(block.s, block.o);
  }

  /** Close every segment and remove any file of this instance still in /dev/shm. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const { segment } of this.#own) segment.close();
    for (const segment of this.#peer.values()) segment.close();
    this.#own.length = 0;
    this.#peer.clear();
    removeSegments(this.prefix);
  }

  #alloc(length: number): [number, number] {
    for (let s = 0; s < this.#own.length; s++) {
      const o = (this.#own[s] as { arena: Arena }).arena.alloc(length);
      if (o >= 0) return [s, o];
    }
    const largest = this.#own.reduce((n, { arena }) => Math.max(n, arena.size), 0);
    const size = Math.max(FIRST_SEGMENT, Math.min(2 * largest, 256 * MiB), Math.ceil((length + ALIGN) / MiB) * MiB);
    const s = this.#own.length;
    const segment = this.mapper.create(this.#path("n", s), size);
    const arena = new Arena(size);
    this.#own.push({ segment, arena });
    return [s, arena.alloc(length)];
  }

  #path(side: "n" | "p", k: number): string {
    return join(SHM_DIR, `${this.prefix}${side}${k}`);
  }
}

/** Remove every /dev/shm file whose name starts with `prefix` (an instance's leftovers). */
export function removeSegments(prefix: string): void {
  let names: string[];
  try {
    names = readdirSync(SHM_DIR);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    try {
      unlinkSync(join(SHM_DIR, name));
    } catch {
      // already gone
    }
  }
}
