import { defineConfig } from "vitest/config";

// Most tests start a real server over the example repository (17 models, each ONNX Runtime or
// scripted-model instance in its own worker thread): on a 2-core machine that takes seconds, so
// the default 5 s per test is too tight to tell a slow start from a hang.
export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
