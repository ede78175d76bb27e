// Without the addon: a copy of the wrappers in a folder with no build/ beside it loads no binding
// (a fresh module instance, so this process's loaded addon is not reused).
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { tsImport } from "tsx/esm/api";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

type Api = typeof import("../src/shared-memory.js");

let dir: string;
let api: Api;
const override = process.env.GALLEY_NATIVE_BINDING;

beforeAll(async () => {
  delete process.env.GALLEY_NATIVE_BINDING;
  dir = mkdtempSync(join(tmpdir(), "galley-no-addon-"));
  mkdirSync(join(dir, "src"));
  for (const file of ["binding.ts", "shared-memory.ts"]) {
    copyFileSync(fileURLToPath(new URL(`../src/${file}`, import.meta.url)), join(dir, "src", file));
  }
  api = (await tsImport(pathToFileURL(join(dir, "src", "shared-memory.ts")).href, import.meta.url)) as Api;
});

afterAll(() => {
  if (override !== undefined) process.env.GALLEY_NATIVE_BINDING = override;
  rmSync(dir, { recursive: true, force: true });
});

describe("shared memory without the addon", () => {
  it("sharedMemoryMapping() says why, without throwing", () => {
    const support = api.sharedMemoryMapping();
    expect(support.available).toBe(false);
    expect(support.reason).toMatch(/Could not load Galley's native addon/);
    expect(support.reason).toContain(join(dir, "build/Release/galley_native.node"));
  });

  it("mapSharedMemory() throws the loader's message, naming the path", () => {
    expect(() => api.mapSharedMemory("/dev/shm/galley-never-created", 8, { create: true })).toThrow(
      /^Unable to map shared memory '\/dev\/shm\/galley-never-created': Could not load Galley's native addon[\s\S]*npm run build -w @galley\/backends-native/,
    );
  });
});
