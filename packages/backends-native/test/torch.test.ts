// The galley_torch addon on CPU over the server's TorchScript fixtures
// (packages/server/test/fixtures/pytorch, made by make-fixtures.py). libtorch must be there:
// CI installs Debian's libtorch-dev, and a missing addon fails these tests rather than skipping them.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { loadTorchModel, torchSupport } from "../src/torch.js";

const FIXTURES = fileURLToPath(new URL("../../server/test/fixtures/pytorch/", import.meta.url));
const f32 = (values: number[]) => new Uint8Array(Float32Array.from(values).buffer);
const readF32 = (bytes: Uint8Array) => Array.from(new Float32Array(bytes.slice().buffer));

describe("galley_torch", () => {
  it("loads: libtorch's version, no CUDA on this machine", () => {
    const support = torchSupport();
    expect(support.reason).toBeUndefined();
    expect(support.available).toBe(true);
    expect(support.version).toMatch(/^\d+\.\d+/);
    expect(support.cudaDevices).toBe(0);
  });

  it("runs forward on the model's thread: arguments by position, outputs by tuple position", async () => {
    const model = await loadTorchModel(join(FIXTURES, "add_sub.pt"));
    expect(model.arguments).toEqual([
      { name: "x", type: "Tensor" },
      { name: "y", type: "Tensor" },
    ]);
    expect(model.returns).toBe("(Tensor, Tensor)");
    const { outputs, inferNs } = await model.execute([
      { datatype: "FP32", shape: [2, 2], data: f32([1, 2, 3, 4]) },
      { datatype: "FP32", shape: [2, 2], data: f32([10, 20, 30, 40]) },
    ]);
    expect(inferNs).toBeGreaterThan(0);
    expect(outputs.map((o) => [o.datatype, o.shape, readF32(o.data ?? new Uint8Array())])).toEqual([
      ["FP32", [2, 2], [11, 22, 33, 44]],
      ["FP32", [2, 2], [-9, -18, -27, -36]],
    ]);
    await model.close();
    await expect(model.execute([])).rejects.toThrow(/closed/);
  });

  it("copies an output that is the caller's input, and reads misaligned inputs", async () => {
    const model = await loadTorchModel(join(FIXTURES, "identity.pt"));
    const input = new Uint8Array(9);
    input.set(f32([5, 6]), 1);
    const view = input.subarray(1, 9);
    const { outputs } = await model.execute([{ datatype: "FP32", shape: [2], data: view }]);
    view.fill(0);
    expect(readF32(outputs[0]?.data ?? new Uint8Array())).toEqual([5, 6]);
    await model.close();
  });

  it("turns a model's own error and a shape error into rejections with libtorch's message", async () => {
    const model = await loadTorchModel(join(FIXTURES, "throws.pt"));
    await expect(model.execute([{ datatype: "FP32", shape: [1], data: f32([-1]) }])).rejects.toThrow(
      /negative input is not allowed/,
    );
    const ok = await model.execute([{ datatype: "FP32", shape: [1], data: f32([3]) }]);
    expect(readF32(ok.outputs[0]?.data ?? new Uint8Array())).toEqual([6]);
    await model.close();
    const addSub = await loadTorchModel(join(FIXTURES, "add_sub.pt"));
    await expect(
      addSub.execute([
        { datatype: "FP32", shape: [3], data: f32([1, 2, 3]) },
        { datatype: "FP32", shape: [2], data: f32([1, 2]) },
      ]),
    ).rejects.toThrow(/size of tensor a \(3\) must match the size of tensor b \(2\)/);
    await addSub.close();
  });

  it("rejects a file that is not TorchScript, and a missing file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-torch-"));
    writeFileSync(join(dir, "bad.pt"), "not a TorchScript file");
    await expect(loadTorchModel(join(dir, "bad.pt"))).rejects.toThrow(/PytorchStreamReader|zip|archive/i);
    await expect(loadTorchModel(join(dir, "missing.pt"))).rejects.toThrow(/missing\.pt/);
  });
});
