import { describe, expect, it } from "vitest";
import { workerEntry } from "./worker-entry.js";

describe("workerEntry", () => {
  it("finds a worker beside built code", () => {
    expect(workerEntry("./js-worker.js", "file:///srv/src/galley/dist/backend/js/js-instance.js").href).toBe(
      "file:///srv/src/galley/dist/backend/js/js-worker.js",
    );
  });

  it("maps a source module's worker to the build: the last src/ becomes dist/", () => {
    expect(workerEntry("./js-worker.js", "file:///srv/src/galley/src/backend/js/js-instance.ts").href).toBe(
      "file:///srv/src/galley/dist/backend/js/js-worker.js",
    );
  });

  it("gives this package's real entries from the sources", async () => {
    const { existsSync } = await import("node:fs");
    const { fileURLToPath } = await import("node:url");
    const { JS_WORKER_URL } = await import("../backend/js/js-instance.js");
    const { ORT_WORKER_URL } = await import("../backend/onnxruntime/ort-instance.js");
    for (const url of [JS_WORKER_URL, ORT_WORKER_URL]) {
      expect(url.pathname).toMatch(/\/packages\/server\/dist\/backend\/.*-worker\.js$/);
      expect(existsSync(fileURLToPath(url))).toBe(true);
    }
  });
});
