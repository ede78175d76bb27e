import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../log.js";
import { fileMapper, type SegmentMapper, segmentMapper } from "./shm-mapping.js";
import { Arena, removeSegments, SHM_DIR, SHM_PREFIX, ShmPool } from "./shm-pool.js";

const prefix = `${SHM_PREFIX}test${process.pid}_`;
afterEach(() => removeSegments(prefix));

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

  it("reads the stub's segments once, as copies, and unlinks them", async () => {
    const stub = fileMapper.create(join(SHM_DIR, `${prefix}p0`), 4096);
    stub.write(128, Uint8Array.of(5, 6, 7, 8));
    const pool = new ShmPool(prefix, await mapper());
    const bytes = pool.take({ name: "x", datatype: "UINT8", shape: [4], s: 0, z: 4096, o: 128, n: 4 });
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
