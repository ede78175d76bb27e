import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../base/log.js";
import { fileMapper, type SegmentMapper, segmentMapper } from "./shm-mapping.js";
import { Arena, removeSegments, SHM_DIR, SHM_PREFIX, ShmPool } from "./shm-pool.js";

const prefix = `${SHM_PREFIX}test${process.pid}_`;
afterEach(() => removeSegments(prefix));

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** Collect garbage until `done()` (finalizers run in a task after a collection). */
async function collectUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !done(); i++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  expect(done()).toBe(true);
}

describe("Arena", () => {
  it("allocates aligned first-fit blocks and coalesces what is released", () => {
    const arena = new Arena(1024);
    const a = arena.alloc(10);
    const b = arena.alloc(100);
    const c = arena.alloc(64);
    expect([a, b, c]).toEqual([0, 64, 192]);
    expect(arena.alloc(2000)).toBe(-1);
    arena.release(b);
    expect(arena.alloc(128)).toBe(64);
    arena.release(a);
    arena.release(64);
    arena.release(c);
    expect(arena.empty).toBe(true);
    expect(arena.alloc(1024)).toBe(0);
    expect(arena.release(12)).toBe(false);
  });
});

const mappers: [string, () => Promise<SegmentMapper>][] = [
  ["file descriptors (no addon)", async () => fileMapper],
  ["the addon's mapping", () => segmentMapper(createLogger({ write: () => undefined }))],
];

describe.each(mappers)("ShmPool through %s", (_, mapper) => {
  it("writes tensors into its own segments, growing them, and reuses released blocks", async () => {
    const pool = new ShmPool(prefix, await mapper());
    const small = pool.put({ name: "a", datatype: "UINT8", shape: [3], data: Uint8Array.of(1, 2, 3) });
    expect(small).toMatchObject({ s: 0, o: 0, n: 3 });
    const path = join(SHM_DIR, `${prefix}n0`);
    expect([...readFileSync(path).subarray(0, 3)]).toEqual([1, 2, 3]);
    const big = pool.put({ name: "b", datatype: "UINT8", shape: [8 << 20], data: new Uint8Array(8 << 20).fill(7) });
    expect(big.s).toBe(1);
    expect(big.z).toBeGreaterThanOrEqual(8 << 20);
    pool.release([[0, 0]]);
    expect(pool.put({ name: "c", datatype: "UINT8", shape: [1], data: Uint8Array.of(9) })).toMatchObject({
      s: 0,
      o: 0,
    });
    expect(pool.put({ name: "e", datatype: "UINT8", shape: [0], data: new Uint8Array(0) })).toMatchObject({
      s: -1,
      n: 0,
    });
    pool.close();
    expect(existsSync(path)).toBe(false);
  });

  it("reads the stub's small tensors once, as copies, releases their blocks and unlinks the segments", async () => {
    const stub = fileMapper.create(join(SHM_DIR, `${prefix}p0`), 4096);
    stub.write(128, Uint8Array.of(5, 6, 7, 8));
    const released: [number, number][] = [];
    const pool = new ShmPool(prefix, await mapper(), (s, o) => released.push([s, o]));
    const { data: bytes, lent } = pool.take({ name: "x", datatype: "UINT8", shape: [4], s: 0, z: 4096, o: 128, n: 4 });
    expect(lent).toBe(false);
    expect(released).toEqual([[0, 128]]);
    expect(existsSync(join(SHM_DIR, `${prefix}p0`))).toBe(false);
    stub.write(128, Uint8Array.of(0, 0, 0, 0));
    expect([...bytes]).toEqual([5, 6, 7, 8]);
    expect(() => pool.take({ name: "x", datatype: "UINT8", shape: [4], s: 0, z: 4096, o: 4094, n: 4 })).toThrow(
      /past the end/,
    );
    stub.close();
    pool.close();
  });
});

describe("ShmPool lending large tensors (the addon's mapping)", () => {
  const MiB = 1 << 20;

  it("lends a large tensor of the stub as a view and releases its block once the view is collected", async (ctx) => {
    const mapped = await segmentMapper(createLogger({ write: () => undefined }));
    if (mapped.kind !== "mapped") ctx.skip();
    const stub = mapped.create(join(SHM_DIR, `${prefix}p0`), 4 * MiB);
    stub.write(MiB, new Uint8Array(MiB).fill(9));
    const released: [number, number][] = [];
    const pool = new ShmPool(prefix, mapped, (s, o) => released.push([s, o]));
    let taken: { data: Uint8Array; lent: boolean } | undefined = pool.take({
      name: "x",
      datatype: "UINT8",
      shape: [MiB],
      s: 0,
      z: 4 * MiB,
      o: MiB,
      n: MiB,
    });
    expect(taken.lent).toBe(true);
    expect(taken.data.byteLength).toBe(MiB);
    expect(taken.data.buffer.byteLength).toBe(MiB);
    // A view, not a copy: what the stub writes there shows through.
    stub.write(MiB + 5, Uint8Array.of(1));
    expect([taken.data[4], taken.data[5]]).toEqual([9, 1]);
    expect(released).toEqual([]);
    expect(pool.lentBytes).toBe(MiB);
    taken = undefined;
    await collectUntil(() => released.length > 0);
    expect(released).toEqual([[0, MiB]]);
    expect(pool.lentBytes).toBe(0);
    stub.close();
    pool.close();
  });

  it("holds a block of its own that the stub answered with until the lent view is collected", async (ctx) => {
    const mapped = await segmentMapper(createLogger({ write: () => undefined }));
    if (mapped.kind !== "mapped") ctx.skip();
    const pool = new ShmPool(prefix, mapped);
    const input = pool.put({ name: "in", datatype: "UINT8", shape: [MiB], data: new Uint8Array(MiB).fill(4) });
    let taken: { data: Uint8Array; lent: boolean } | undefined = pool.take({ ...input, r: 1 });
    expect(taken.lent).toBe(true);
    // The stub lets go of its input; the block stays ours while the view lives.
    pool.release([[input.s, input.o]]);
    const next = pool.put({ name: "in", datatype: "UINT8", shape: [MiB], data: new Uint8Array(MiB).fill(5) });
    expect([next.s, next.o]).not.toEqual([input.s, input.o]);
    expect(taken.data[MiB - 1]).toBe(4);
    taken = undefined;
    await collectUntil(() => pool.lentBytes === 0);
    pool.release([[next.s, next.o]]);
    const again = pool.put({ name: "in", datatype: "UINT8", shape: [MiB], data: new Uint8Array(MiB) });
    expect([again.s, again.o]).toEqual([input.s, input.o]);
    pool.close();
  });

  it("copies small tensors and those past what it may lend at once", async (ctx) => {
    const mapped = await segmentMapper(createLogger({ write: () => undefined }));
    if (mapped.kind !== "mapped") ctx.skip();
    const pool = new ShmPool(prefix, mapped);
    const small = pool.put({ name: "s", datatype: "UINT8", shape: [1024], data: new Uint8Array(1024) });
    expect(pool.take({ ...small, r: 1 }).lent).toBe(false);
    const big = pool.put({ name: "b", datatype: "UINT8", shape: [200 * MiB], data: new Uint8Array(200 * MiB) });
    const first = pool.take({ ...big, r: 1 });
    expect(first.lent).toBe(true);
    expect(pool.take({ ...big, r: 1 }).lent).toBe(false);
    expect(first.data.byteLength).toBe(200 * MiB);
    pool.close();
  });
});
