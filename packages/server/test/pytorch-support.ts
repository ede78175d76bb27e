// Model repositories of TorchScript fixtures (fixtures/pytorch, made by make-fixtures.py) for the
// PyTorch backend's tests.
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const TORCH_FIXTURES = fileURLToPath(new URL("./fixtures/pytorch/", import.meta.url));

/** Write `<repo>/<name>/config.pbtxt` and `<repo>/<name>/1/model.pt` (a fixture, or a path). */
export function torchModel(repo: string, name: string, model: string, config: string): string {
  const folder = join(repo, name);
  mkdirSync(join(folder, "1"), { recursive: true });
  writeFileSync(join(folder, "config.pbtxt"), `name: "${name}"\nplatform: "pytorch_libtorch"\n${config}`);
  copyFileSync(model.includes("/") ? model : join(TORCH_FIXTURES, `${model}.pt`), join(folder, "1", "model.pt"));
  return folder;
}

/** A config's `input [...]` or `output [...]` from `name:type:dims` entries. */
export function tensors(kind: "input" | "output", ...specs: string[]): string {
  const entries = specs.map((spec) => {
    const [name, type, dims] = spec.split(":");
    return `  { name: "${name}" data_type: TYPE_${type} dims: [ ${dims} ] }`;
  });
  return `${kind} [\n${entries.join(",\n")}\n]\n`;
}

/** Little-endian bytes of FP32 values, and back. */
export function f32(values: readonly number[]): Uint8Array {
  return new Uint8Array(Float32Array.from(values).buffer);
}
export function readF32(bytes: Uint8Array | undefined): number[] {
  return Array.from(new Float32Array((bytes ?? new Uint8Array()).slice().buffer));
}

/** What make-aoti-fixtures.py wrote: `<dir>/<name>/model.pt2` and the expected values (base64 bytes). */
export interface AotiFixtures {
  dir: string;
  expected: {
    add_sub: { x: string; y: string; sum: string; product: string; rows: number };
    types: { a: string; b: string; n: string; sum: string; pair0: string; pair1: string; count: string; rows: number };
    torch: string;
    call_spec: Record<string, string[]>;
  };
}

/**
 * Build the AOTInductor fixtures here (CPU packages hold kernels for this processor), once per
 * script version and torch: into the system's temp folder, reused by later test files and runs.
 * Needs `python3` with torch 2.x and a C++ compiler (`node scripts/test-env.mjs` puts one first).
 */
export async function aotiFixtures(): Promise<AotiFixtures> {
  const { createHash } = await import("node:crypto");
  const { existsSync, readFileSync, renameSync, rmSync, mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { execFile } = await import("node:child_process");
  const { promisify } = await import("node:util");
  const run = promisify(execFile);
  const script = join(TORCH_FIXTURES, "make-aoti-fixtures.py");
  const { stdout: version } = await run("python3", ["-c", "import torch; print(torch.__version__)"]);
  const key = createHash("sha256").update(readFileSync(script)).update(version).digest("hex").slice(0, 16);
  const dir = join(tmpdir(), `galley-aoti-fixtures-${key}`);
  if (!existsSync(join(dir, "expected.json"))) {
    const building = mkdtempSync(join(tmpdir(), "galley-aoti-building-"));
    try {
      await run("python3", [script, building], { maxBuffer: 64 << 20 });
      // Whole or not at all: another test file may be building the same fixtures.
      if (!existsSync(join(dir, "expected.json"))) {
        rmSync(dir, { recursive: true, force: true });
        renameSync(building, dir);
      }
    } finally {
      rmSync(building, { recursive: true, force: true });
    }
  }
  return { dir, expected: JSON.parse(readFileSync(join(dir, "expected.json"), "utf8")) as AotiFixtures["expected"] };
}

/** Write `<repo>/<name>/config.pbtxt` (platform torch_aoti) and `<repo>/<name>/1/model.pt2`. */
export function aotiModel(repo: string, name: string, pt2: string, config: string): string {
  const folder = join(repo, name);
  mkdirSync(join(folder, "1"), { recursive: true });
  writeFileSync(join(folder, "config.pbtxt"), `name: "${name}"\nplatform: "torch_aoti"\n${config}`);
  copyFileSync(pt2, join(folder, "1", "model.pt2"));
  return folder;
}
