import { defineConfig } from "vitest/config";

// Tests start real servers and child processes (`galley perf`, packed installs); on a loaded
// 2-core runner the default 5 s per test is too tight to tell slow from stuck.
export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
