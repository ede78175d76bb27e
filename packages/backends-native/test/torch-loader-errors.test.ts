// A separate file so the module-level cache of a successful load does not hide the failure path.
import { describe, expect, it } from "vitest";
import { loadTorchBinding } from "../src/torch-binding.js";

describe("loadTorchBinding failures", () => {
  it("throws one message naming every candidate tried and what to install", () => {
    let message = "";
    try {
      loadTorchBinding(["/nonexistent/galley_torch.node"]);
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toMatch(/Could not load Galley's torch addon/);
    expect(message).toContain("/nonexistent/galley_torch.node: Cannot find module");
    expect(message).toMatch(/apt-get install libtorch-dev/);
    expect(message).toMatch(/pip install torch/);
    expect(message).toMatch(/LIBTORCH=/);
  });
});
