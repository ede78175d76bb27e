import { describe, expect, it } from "vitest";
import { BINDING_ABI_VERSION, bindingCandidates, loadBinding } from "./binding.js";

describe("loadBinding", () => {
  it("loads the addon that the build produced", () => {
    const binding = loadBinding();
    expect(binding.abiVersion).toBe(BINDING_ABI_VERSION);
    expect(typeof binding.probeCuda).toBe("function");
    expect(typeof binding.mapSharedMemory).toBe("function");
  });

  it("lists node-gyp's build folders, and an override first", () => {
    process.env.GALLEY_NATIVE_BINDING = "/opt/custom.node";
    try {
      const candidates = bindingCandidates();
      expect(candidates[0]).toBe("/opt/custom.node");
      expect(candidates.slice(1).map((c) => c.replace(/.*\/build\//, "build/"))).toEqual([
        "build/Release/galley_native.node",
        "build/Debug/galley_native.node",
      ]);
    } finally {
      delete process.env.GALLEY_NATIVE_BINDING;
    }
  });
});
