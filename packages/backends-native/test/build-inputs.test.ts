// nx restores a build from its cache when the build's inputs are unchanged, and the addon's inputs
// are more than its files: the libtorch it links and the Node ABI it is built for. A build made
// before libtorch was installed (or against another one) must never be restored where another
// libtorch would be linked: the torch addon would be missing, or linked against the wrong one.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const PACKAGE = join(import.meta.dirname, "..");
const ROOT = join(PACKAGE, "..", "..");
const FIND = "node packages/backends-native/native/torch/torch_find.cjs where";

/** A folder laid out as a libtorch distribution of `version` (headers and the library's name only). */
function fakeLibtorch(version: string): string {
  const root = mkdtempSync(join(tmpdir(), "galley-libtorch-"));
  made.push(root);
  mkdirSync(join(root, "include", "torch", "csrc", "api", "include", "torch"), { recursive: true });
  mkdirSync(join(root, "lib"));
  writeFileSync(join(root, "include", "torch", "script.h"), "");
  writeFileSync(
    join(root, "include", "torch", "csrc", "api", "include", "torch", "version.h"),
    `#define TORCH_VERSION \\\n  "${version}"\n`,
  );
  writeFileSync(join(root, "lib", "libtorch_cpu.so"), "");
  return root;
}
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** What the build's runtime input prints with `env`, run as nx runs it (from the workspace root). */
function where(env: Record<string, string>): string {
  return execFileSync("sh", ["-c", FIND], { cwd: ROOT, env: { ...process.env, ...env }, encoding: "utf8" }).trim();
}

describe("the addon's build inputs (nx's cache key)", () => {
  it("include which libtorch the build would link, and the Node ABI", () => {
    const pkg = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8"));
    const inputs: unknown[] = pkg.nx.targets.build.inputs;
    expect(inputs).toContainEqual({ runtime: FIND });
    expect(inputs).toContainEqual({ runtime: "node -p process.versions.modules" });
  });

  it("change with the libtorch: its folder and the version its headers declare", () => {
    const a = fakeLibtorch("9.1.0");
    const b = fakeLibtorch("9.2.0");
    expect(where({ LIBTORCH: a })).toBe(`LIBTORCH, libtorch 9.1.0 (${a}), CPU only`);
    expect(where({ LIBTORCH: b })).toBe(`LIBTORCH, libtorch 9.2.0 (${b}), CPU only`);
    expect(where({ GALLEY_TORCH: "0" })).toBe("no libtorch found (LIBTORCH, python3's torch, Debian's libtorch-dev)");
  });
});
