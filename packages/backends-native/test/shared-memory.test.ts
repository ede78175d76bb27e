// Real files in /dev/shm, each with a unique name and removed after its test.
import { execFile } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { mapSharedMemory, type SharedMapping, sharedMemoryMapping } from "../src/index.js";

const run = promisify(execFile);
const PAGE = 4096;
const created: string[] = [];
const open: SharedMapping[] = [];

/** A fresh /dev/shm path, removed after the test. */
function shmPath(): string {
  const path = `/dev/shm/galley-test-${process.pid}-${randomUUID()}`;
  created.push(path);
  return path;
}

/** mapSharedMemory, closed after the test. */
function map(...args: Parameters<typeof mapSharedMemory>): SharedMapping {
  const mapping = mapSharedMemory(...args);
  open.push(mapping);
  return mapping;
}

function mappedHere(path: string): boolean {
  return readFileSync("/proc/self/maps", "utf8").includes(path);
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

afterEach(() => {
  for (const mapping of open.splice(0)) mapping.close();
  for (const path of created.splice(0)) rmSync(path, { force: true });
});

describe("mapSharedMemory", () => {
  it("creates the object (0600, sized) and shares bytes with the file both ways", () => {
    const path = shmPath();
    const mapping = map(path, 64, { create: true });
    expect(mapping.byteLength).toBe(64);
    expect(mapping.buffer.byteLength).toBe(64);
    expect(statSync(path).size).toBe(64);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(mappedHere(path)).toBe(true);

    const view = new Uint8Array(mapping.buffer);
    view.set([1, 2, 3], 10);
    expect([...readFileSync(path).subarray(10, 13)]).toEqual([1, 2, 3]);

    const fd = openSync(path, "r+");
    try {
      writeSync(fd, Buffer.from("galley"), 0, 6, 40);
    } finally {
      closeSync(fd);
    }
    expect(Buffer.from(mapping.buffer, 40, 6).toString()).toBe("galley");
  });

  it("maps an existing file; two mappings of one object see each other's writes", () => {
    const path = shmPath();
    writeFileSync(path, Buffer.alloc(2 * PAGE));
    const a = map(path, 2 * PAGE);
    const b = map(path, 2 * PAGE);
    new Uint32Array(a.buffer)[100] = 0xdeadbeef;
    expect(new Uint32Array(b.buffer)[100]).toBe(0xdeadbeef);
    new Uint8Array(b.buffer)[PAGE + 1] = 7;
    expect(new Uint8Array(a.buffer)[PAGE + 1]).toBe(7);
  });

  it("accepts an offset that is not page-aligned, for an existing file and with create", () => {
    const path = shmPath();
    const pattern = Buffer.alloc(3 * PAGE);
    for (let i = 0; i < pattern.length; i++) pattern[i] = i % 251;
    writeFileSync(path, pattern);
    const offset = PAGE + 1;
    const mapping = map(path, 100, { offset });
    expect(mapping.buffer.byteLength).toBe(100);
    expect(Buffer.from(mapping.buffer).equals(pattern.subarray(offset, offset + 100))).toBe(true);
    new Uint8Array(mapping.buffer)[0] = 255;
    expect(readFileSync(path)[offset]).toBe(255);

    const createdPath = shmPath();
    const fresh = map(createdPath, 10, { offset: 123, create: true });
    expect(statSync(createdPath).size).toBe(133);
    new Uint8Array(fresh.buffer)[9] = 9;
    expect(readFileSync(createdPath)[132]).toBe(9);
  });

  it("refuses zero length, ranges beyond the file's size and bad arguments, with the path in the message", () => {
    const path = shmPath();
    writeFileSync(path, Buffer.alloc(PAGE));
    const prefix = `Unable to map shared memory '${path}': `;
    expect(() => mapSharedMemory(path, 0)).toThrow(`${prefix}byteLength must be a positive integer, got 0`);
    expect(() => mapSharedMemory(path, PAGE + 1)).toThrow(
      `${prefix}byteLength ${PAGE + 1} at offset 0 is beyond the file's size (${PAGE} bytes)`,
    );
    expect(() => mapSharedMemory(path, 1, { offset: PAGE })).toThrow(
      `${prefix}byteLength 1 at offset ${PAGE} is beyond the file's size (${PAGE} bytes)`,
    );
    expect(() => mapSharedMemory(path, 1, { offset: -1 })).toThrow(`${prefix}offset must be a non-negative integer`);
    expect(() => mapSharedMemory(path, 1.5)).toThrow(`${prefix}byteLength must be a positive integer`);
    expect(() => mapSharedMemory(path, 1, { create: true })).toThrow(`${prefix}File exists`);
    const missing = shmPath();
    expect(() => mapSharedMemory(missing, 1)).toThrow(
      `Unable to map shared memory '${missing}': No such file or directory`,
    );
    expect(() => mapSharedMemory("/proc/galley-no-such-dir/x", 1, { create: true })).toThrow(
      "Unable to map shared memory '/proc/galley-no-such-dir/x': No such file or directory",
    );
    expect(existsSync(missing)).toBe(false);
  });

  it("close() unmaps at once, detaches the buffer and its views, and is idempotent", () => {
    const path = shmPath();
    const mapping = mapSharedMemory(path, PAGE, { create: true });
    const view = new Uint8Array(mapping.buffer);
    view[0] = 1;
    mapping.close();
    expect(mapping.buffer.byteLength).toBe(0);
    expect(view.length).toBe(0);
    view[0] = 2; // a write to a detached view is dropped: no crash
    expect(view[0]).toBeUndefined();
    expect(() => new Uint8Array(mapping.buffer, 0, 1)).toThrow(TypeError);
    expect(mappedHere(path)).toBe(false);
    mapping.close();
    expect(mapping.byteLength).toBe(PAGE);
    expect(readFileSync(path)[0]).toBe(1);
  });

  it("close() after the buffer was moved away leaves the pages to the new owner, or unmaps where a move copies", () => {
    const path = shmPath();
    const mapping = mapSharedMemory(path, 8, { create: true });
    if ("transfer" in ArrayBuffer.prototype) {
      // Node 22+: the bytes move with transfer(); the mapping's own buffer is already detached.
      const moved = (mapping.buffer as ArrayBuffer & { transfer(): ArrayBuffer }).transfer();
      mapping.close();
      new Uint8Array(moved)[0] = 5;
      expect(readFileSync(path)[0]).toBe(5);
      expect(mappedHere(path)).toBe(true);
    } else {
      // Node 20 has no transfer(): a structured clone copies the bytes, and close() unmaps.
      new Uint8Array(mapping.buffer)[0] = 7;
      const copy = structuredClone(mapping.buffer);
      mapping.close();
      expect(new Uint8Array(copy)[0]).toBe(7);
      expect(mappedHere(path)).toBe(false);
    }
  });

  it("unmaps a mapping dropped without close() when it is garbage-collected", async () => {
    const path = shmPath();
    const dir = mkdtempSync(join(tmpdir(), "galley-shm-gc-"));
    try {
      const script = join(dir, "child.mts");
      writeFileSync(
        script,
        `import { readFileSync } from "node:fs";
import { mapSharedMemory } from ${JSON.stringify(fileURLToPath(new URL("../src/index.ts", import.meta.url)))};
const path = process.argv[2];
const mapped = () => readFileSync("/proc/self/maps", "utf8").includes(path);
(() => { new Uint8Array(mapSharedMemory(path, ${PAGE}, { create: true }).buffer)[0] = 42; })();
const before = mapped();
let collections = 0;
// The finalizer runs on the event loop after the collection that freed the buffer.
while (mapped() && collections < 100) {
  globalThis.gc();
  collections++;
  await new Promise((resolve) => setImmediate(resolve));
}
console.log(JSON.stringify({ before, after: mapped(), collections }));
`,
      );
      const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", script, path], {
        cwd: fileURLToPath(new URL("..", import.meta.url)),
      });
      const result = JSON.parse(stdout) as { before: boolean; after: boolean; collections: number };
      expect(result).toMatchObject({ before: true, after: false });
      expect(readFileSync(path)[0]).toBe(42);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("maps 16 MiB, and a Python process sees the same bytes (and Node sees Python's)", async () => {
    const path = shmPath();
    const size = 16 * 1024 * 1024;
    const mapping = map(path, size, { create: true });
    const words = new Uint32Array(mapping.buffer);
    for (let i = 0; i < words.length; i++) words[i] = Math.imul(i, 2654435761) >>> 0;
    const expected = sha256(new Uint8Array(mapping.buffer));
    expect(sha256(readFileSync(path))).toBe(expected);

    const python = `
import hashlib, mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
with mmap.mmap(fd, 0) as m:
    print(hashlib.sha256(m).hexdigest())
    m[${size - 6}:] = b"python"
os.close(fd)
`;
    const { stdout } = await run("python3", ["-c", python, path]);
    expect(stdout.trim()).toBe(expected);
    expect(Buffer.from(mapping.buffer, size - 6).toString()).toBe("python");
  });
});

describe("sharedMemoryMapping", () => {
  it("reports the addon available when it was built", () => {
    expect(sharedMemoryMapping()).toEqual({ available: true, reason: "" });
  });
});
