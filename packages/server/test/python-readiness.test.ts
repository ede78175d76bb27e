// A Python model's readiness as Triton's Python backend reports it (issue 48, Triton's
// L0_backend_python/model_readiness): the model's own `is_ready()` (true, false, raising, not a
// bool, a coroutine, slower than the 5 s Triton waits, one call in flight at a time), the reasons
// logged at verbose level 1 in Triton's words, and the stub named as Triton's is.
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/index.js";
import { PYTHON_FIXTURES, pythonWithNumpy, stubProcesses } from "./python-harness.js";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

/** The `is_ready` fixture as `name`, its is_ready() answering as `mode` says (after `delay` s). */
function variant(repo: string, name: string, mode: string, delay = 0): void {
  cpSync(join(PYTHON_FIXTURES, "is_ready"), join(repo, name), { recursive: true });
  const file = join(repo, name, "config.pbtxt");
  const config = readFileSync(file, "utf8")
    .replace('name: "is_ready"', `name: "${name}"`)
    .replace('key: "READY" value: { string_value: "true" }', `key: "READY" value: { string_value: "${mode}" }`)
    .replace('key: "DELAY" value: { string_value: "0" }', `key: "DELAY" value: { string_value: "${delay}" }`);
  writeFileSync(file, config);
}

async function readinessServer(models: [string, string, number?][]) {
  const repo = tempRepository();
  for (const [name, mode, delay] of models) variant(repo, name, mode, delay);
  const lines: string[] = [];
  const log = createLogger({ verboseLevel: 1, write: (line) => lines.push(line) });
  const running = await startServer({ modelRepositories: [repo], pythonExecutable: python, log });
  expect(running.failedModels).toEqual([]);
  const ready = async (name: string) => (await running.client.modelReady({ name })).ready;
  const infer = async (name: string) =>
    (
      await running.client.modelInfer({
        modelName: name,
        inputs: [{ name: "INPUT0", datatype: "UINT8", shape: [3n] }],
        rawInputContents: [Uint8Array.of(1, 2, 3)],
      })
    ).rawOutputContents[0];
  return { ...running, lines, ready, infer };
}

describe("a Python model's readiness", () => {
  it("asks the model's is_ready(): false, raising or not a bool is not ready, in Triton's words; inference goes on", async () => {
    const { ready, infer, lines } = await readinessServer([
      ["yes", "true"],
      ["no", "false"],
      ["raises", "raise"],
      ["text", "string"],
      ["later", "coroutine"],
    ]);
    for (let i = 0; i < 3; i++) {
      expect(await ready("yes")).toBe(true);
      expect(await ready("later")).toBe(true);
      for (const name of ["no", "raises", "text"]) {
        expect(await ready(name), name).toBe(false);
        expect(await infer(name), name).toEqual(Uint8Array.of(1, 2, 3));
      }
    }
    const logged = lines.join("");
    expect(logged).toContain(
      "Model 'no' version 1 is not ready: Model 'no_0' is not ready (user-defined check failed).",
    );
    expect(logged).toContain("Model 'raises' version 1 is not ready: RuntimeError: not today");
    expect(logged).toContain(
      "Model 'text' version 1 is not ready: TritonModelException: is_ready() must return a boolean value",
    );
  });

  it("waits 5 s for is_ready(); a check that comes meanwhile shares the call in flight", async () => {
    const { ready, infer, lines } = await readinessServer([["slow", "true", 7]]);
    const started = performance.now();
    // Triton's timeout: not ready after 5 s; the model's call goes on.
    expect(await ready("slow")).toBe(false);
    expect(performance.now() - started).toBeGreaterThan(4900);
    // Inference is not held up by it.
    expect(await infer("slow")).toEqual(Uint8Array.of(1, 2, 3));
    // The next check waits for that call (7 s in all) instead of asking again: ready.
    expect(await ready("slow")).toBe(true);
    expect(performance.now() - started).toBeLessThan(9500);
    expect(lines.join("")).toContain(
      "Model 'slow' version 1 is not ready: Timed out waiting for user-defined is_ready() response",
    );
  }, 30_000);

  it("names each instance's stub process as Triton's is (pgrep -f triton_python_backend_stub), with the instance's name", async () => {
    await readinessServer([["yes", "true"]]);
    const stubs = stubProcesses().map((p) => readFileSync(`/proc/${p.pid}/cmdline`, "utf8").split("\0"));
    expect(stubs.some((argv) => argv.includes("triton_python_backend_stub") && argv.includes("yes_0"))).toBe(true);
  });
});
