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
