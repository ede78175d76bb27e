// A worker's direct routes: a route is renewed every second (and brought again by every call that
// went the usual way), so a backend's runner module must be imported once per worker, and one that
// cannot be loaded must leave the calls on the usual path without an import and a warning each.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { create } from "@bufbuild/protobuf";
import { ModelConfigSchema } from "@galley/proto";
import { afterAll, describe, expect, it } from "vitest";
import type { DirectRoute } from "../backend.js";
import { DirectCalls } from "./bls-direct.js";

const dir = mkdtempSync(join(tmpdir(), "galley-bls-direct-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function calls(warnings: string[]): DirectCalls {
  const quiet = () => {};
  return new DirectCalls({
    record: quiet,
    log: { info: quiet, warn: (m: string) => warnings.push(m), verbose: quiet },
  });
}

function route(runner: string): DirectRoute {
  const config = create(ModelConfigSchema, { name: "m", maxBatchSize: 4 });
  return { model: "m", version: 1, config, target: { runner, spec: {}, instances: 1 } };
}

const request = { model: "m", inputs: [] };

describe("DirectCalls", () => {
  it("imports a runner module once however often its route is learned, and makes a runner each time", async () => {
    const file = join(dir, "runner.mjs");
    writeFileSync(
      file,
      `globalThis.galleyRunnerLoads = (globalThis.galleyRunnerLoads ?? 0) + 1;
export function createDirectRunner() {
  globalThis.galleyRunnersMade = (globalThis.galleyRunnersMade ?? 0) + 1;
  return { run: async () => { throw new Error("not run in this test"); } };
}`,
    );
    const warnings: string[] = [];
    const direct = calls(warnings);
    for (let i = 0; i < 3; i++) direct.learn(request, route(pathToFileURL(file).href));
    // The route's runner is awaited by a call; a cancelled one stops before running.
    await expect(direct.infer(request, () => true)).rejects.toThrow("[request id: <id_unknown>] request cancelled");
    const counts = globalThis as { galleyRunnerLoads?: number; galleyRunnersMade?: number };
    expect([counts.galleyRunnerLoads, counts.galleyRunnersMade, warnings]).toEqual([1, 3, []]);
  });

  it("leaves calls on the usual path when the module cannot be loaded, with one warning", async () => {
    const warnings: string[] = [];
    const direct = calls(warnings);
    const missing = route(pathToFileURL(join(dir, "missing.mjs")).href);
    for (let i = 0; i < 4; i++) {
      direct.learn(request, missing);
      expect(await direct.infer(request, () => false)).toBeUndefined();
    }
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^direct BLS calls to 'm' are not available here: .*missing\.mjs/);
  });
});
