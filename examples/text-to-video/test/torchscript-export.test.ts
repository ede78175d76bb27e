// The committed TorchScript files (models/*/1/model.pt, the GPU variant's) are what
// scripts/export-torchscript.py writes from the ONNX files and its own module code: byte for byte
// under the torch they were written with (1.13), their weights under another (the torch 2.13 of
// `npm test`'s environment); what they compute is compared with the ONNX files in torch-variant.test.ts.
// A change to the script's weights that is not exported again, or a model.pt edited by hand, fails here.
import { execFile, execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const SCRIPT = fileURLToPath(new URL("../scripts/export-torchscript.py", import.meta.url));

/** python3 when it imports torch, else Debian's /usr/bin/python3 (as package.json's models:torch). */
function pythonWithTorch(): string {
  try {
    execFileSync("python3", ["-c", "import torch"], { stdio: "ignore", timeout: 60_000 });
    return "python3";
  } catch {
    return "/usr/bin/python3";
  }
}

describe("export-torchscript.py", () => {
  it("writes the committed model.pt files (--check)", async () => {
    const { stdout } = await promisify(execFile)(pythonWithTorch(), [SCRIPT, "--check"], { timeout: 120_000 });
    const lines = stdout.trim().split("\n");
    expect(lines.map((line) => line.split(":")[0])).toEqual(
      ["text_encoder", "denoiser", "vae_decoder", "super_resolution", "frame_interpolation"].map(
        (name) => `models/${name}/1/model.pt`,
      ),
    );
    for (const line of lines) expect(line).toMatch(/: same (weights )?\(/);
  });
});
