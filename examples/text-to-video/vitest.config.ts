import { defineConfig } from "vitest/config";

// The tests start a real server over models/ (ten models, ONNX Runtime sessions and scripted-model
// workers): on a loaded 2-core machine that takes a few seconds.
export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
