import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

/** The raw addon, as `native/addon.cc` exports it. Only this package's wrappers use it. */
export interface Binding {
  /** Bumped whenever the exports below change shape. */
  abiVersion: number;
  probeCuda(): Promise<{ available: boolean; driverVersion: number; deviceCount: number; error: string }>;
  /**
   * mmap `byteLength` bytes of `path` from `offset` (any offset: aligned to a page inside),
   * read-write and MAP_SHARED; with `create`, O_CREAT|O_EXCL (0600) and ftruncate to
   * offset + byteLength. Throws `Unable to map shared memory '<path>': <why>`. `unmap(buffer)`
   * detaches `buffer` and munmaps, once; collecting `buffer` munmaps too, once.
   */
  mapSharedMemory(
    path: string,
    byteLength: number,
    offset: number,
    create: boolean,
  ): { buffer: ArrayBuffer; unmap(buffer: ArrayBuffer): void };
}

/** The ABI these wrappers were written against. */
export const BINDING_ABI_VERSION = 2;

/** Where the addon may be: an explicit override first, then node-gyp's build folders. */
export function bindingCandidates(): string[] {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const fromEnv = process.env.GALLEY_NATIVE_BINDING;
  return [
    ...(fromEnv ? [fromEnv] : []),
    `${root}build/Release/galley_native.node`,
    `${root}build/Debug/galley_native.node`,
  ];
}

/**
 * Require the first of `candidates` that loads and has `abiVersion`; otherwise throw one error
 * that names `what`, lists every attempt and ends with `hint` (what to build or install).
 */
export function requireAddon<T extends { abiVersion: number }>(
  candidates: readonly string[],
  abiVersion: number,
  what: string,
  hint: readonly string[],
): T {
  const require = createRequire(import.meta.url);
  const failures: string[] = [];
  for (const path of candidates) {
    try {
      const binding = require(path) as T;
      if (binding.abiVersion === abiVersion) return binding;
      failures.push(`${path}: ABI ${binding.abiVersion}, expected ${abiVersion} (stale build)`);
    } catch (error) {
      failures.push(`${path}: ${(error as Error).message.split("\n")[0]}`);
    }
  }
  throw new Error([`Could not load ${what}. Tried:`, ...failures.map((f) => `  - ${f}`), ...hint].join("\n"));
}

let cached: Binding | undefined;

/**
 * Load the addon on first use. Tries each candidate in order and, if none loads, throws one
 * error that lists every attempt and says how to build it. Nothing is loaded at import time, so
 * the server runs without the addon.
 */
export function loadBinding(candidates: string[] = bindingCandidates()): Binding {
  cached ??= requireAddon<Binding>(candidates, BINDING_ABI_VERSION, "Galley's native addon (@galley/backends-native)", [
    "Build it with `npm run build -w @galley/backends-native` (needs a C++17 compiler and node-gyp),",
    "or point GALLEY_NATIVE_BINDING at a built galley_native.node.",
  ]);
  return cached;
}
