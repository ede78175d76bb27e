// Client-side system shared memory: real /dev/shm objects, unique keys, bounds, and cleanup that
// cannot leak (dispose, `await using`, normal exit, SIGTERM) checked in real child processes.
import { execFile, spawn } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { SHM_ROOT, SystemSharedMemory } from "../src/index.js";

const run = promisify(execFile);
const DIST = new URL("../dist/index.js", import.meta.url).pathname;
const path = (key: string) => join(SHM_ROOT, key.slice(1));

describe("SystemSharedMemory", () => {
  it("creates a /dev/shm object of the size asked, readable and writable at offsets", async () => {
    const region = await SystemSharedMemory.create(4096);
    try {
      expect(existsSync(path(region.key))).toBe(true);
      expect(region.key).toMatch(new RegExp(`^/galley-${process.pid}-[0-9a-f]{12}$`));
      await region.write(100, new Uint8Array([1, 2, 3]));
      expect([...(await region.read(99, 5))]).toEqual([0, 1, 2, 3, 0]);
      await expect(region.write(4095, new Uint8Array(2))).rejects.toThrow("outside region");
      expect(() => region.input("INT32", [1, 16], 4090, 64)).toThrow(RangeError);
      expect(region.input("INT32", [1, 16], 64, 64)).toEqual({
        datatype: "INT32",
        shape: [1, 16],
        sharedMemory: { region: region.name, offset: 64, byteSize: 64 },
      });
    } finally {
      await region.dispose();
    }
    expect(existsSync(path(region.key))).toBe(false);
    await expect(region.read(0, 1)).rejects.toThrow("was disposed");
  });

  it("gives every region a key of its own", async () => {
    const regions = await Promise.all(Array.from({ length: 20 }, () => SystemSharedMemory.create(64)));
    expect(new Set(regions.map((r) => r.key)).size).toBe(20);
    await Promise.all(regions.map((r) => r.dispose()));
  });

  it("removes the region when an `await using` scope ends", async () => {
    let key = "";
    {
      await using region = await SystemSharedMemory.create(64);
      key = region.key;
      expect(existsSync(path(key))).toBe(true);
    }
    expect(existsSync(path(key))).toBe(false);
  });

  it("removes regions a process forgot, when it exits and when it is killed with SIGTERM", async () => {
    const script = (tail: string) =>
      `import { SystemSharedMemory } from ${JSON.stringify(DIST)};
       const r = await SystemSharedMemory.create(1 << 20);
       console.log(r.key);
       ${tail}`;
    const exited = await run(process.execPath, ["--input-type=module", "-e", script("")]);
    const key = exited.stdout.trim();
    expect(key).toMatch(/^\/galley-/);
    expect(existsSync(path(key))).toBe(false);

    const child = spawn(process.execPath, ["--input-type=module", "-e", script("setInterval(() => {}, 1000);")]);
    const killedKey = await new Promise<string>((resolve) =>
      child.stdout.once("data", (d: Buffer) => resolve(d.toString().trim())),
    );
    expect(existsSync(path(killedKey))).toBe(true);
    const exit = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once("exit", (_code, signal) => resolve(signal)),
    );
    child.kill("SIGTERM");
    expect(await exit).toBe("SIGTERM");
    expect(existsSync(path(killedKey))).toBe(false);
    expect(readdirSync(SHM_ROOT).filter((f) => f.startsWith(`galley-${child.pid}-`))).toEqual([]);
  });
});
