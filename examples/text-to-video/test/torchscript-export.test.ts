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

  it("frame_interpolation's motion in chunks of pairs gives the video all pairs at once give", async () => {
    // At 1024x1024 a pair's block matching needs ~4.4 GB, so the module matches a few pairs at a
    // time (motion_bytes); at test sizes every pair fits one chunk unless the budget is 1 byte.
    const model = fileURLToPath(new URL("../models/frame_interpolation/1/model.pt", import.meta.url));
    const check = [
      "import json, sys, torch",
      "m = torch.jit.load(sys.argv[1])",
      "torch.manual_seed(1)",
      "frames = torch.rand(9, 3, 64, 80)",
      "count = torch.tensor([17], dtype=torch.int32)",
      "whole = m(frames, count)",
      "m.motion_bytes = 1",
      "chunked = m(frames, count)",
      "moving = int((whole[1:-1:2].int() - whole[0:-2:2].int()).abs().sum())",
      "print(json.dumps({'equal': torch.equal(whole, chunked), 'shape': list(whole.shape), 'moving': moving}))",
    ].join("\n");
    const { stdout } = await promisify(execFile)(pythonWithTorch(), ["-c", check, model], { timeout: 120_000 });
    const result = JSON.parse(stdout) as { equal: boolean; shape: number[]; moving: number };
    expect(result.shape).toEqual([17, 64, 80, 3]);
    expect(result.equal).toBe(true);
    // In-between frames differ from their left neighbours: the motion path ran, not a copy.
    expect(result.moving).toBeGreaterThan(0);
  });
});
