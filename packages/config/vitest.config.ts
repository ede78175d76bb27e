import { defineConfig } from "vitest/config";

// Property and fuzz tests run thousands of cases per test; on a loaded 2-core runner the default
// 5 s per test is too tight to tell slow from stuck (the fuzz tests guard against hangs per input).
export default defineConfig({
  test: {
    testTimeout: 30_000,
  },
});
