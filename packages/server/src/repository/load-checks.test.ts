import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readModelSource } from "@galley/config";
import { describe, expect, it } from "vitest";
import type { Backend } from "../backend/backend.js";
import { BackendRegistry } from "../backend/registry.js";
import { LoadChecks } from "./load-checks.js";

/** A backend that counts its auto-complete calls (a scripted model's each start a worker). */
function countingBackend(): Backend & { calls: string[] } {
  const calls: string[] = [];
  return {
    name: "counted",
    calls,
    load: () => Promise.reject(new Error("not loaded here")),
    async autoComplete(config) {
      calls.push(config.name);
      return undefined;
    },
  };
}

async function repository(models: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "galley-load-checks-"));
  for (const [name, text] of Object.entries(models)) {
    await mkdir(join(root, name, "1"), { recursive: true });
    await writeFile(join(root, name, "config.pbtxt"), text);
  }
  return root;
}

describe("LoadChecks", () => {
  it("runs a model's auto-complete once, and not again for an ensemble's composing models", async () => {
    const backend = countingBackend();
    const root = await repository({
      one: 'backend: "counted"\nmax_batch_size: 0\ninput [{ name: "X", data_type: TYPE_FP32, dims: [1] }]\noutput [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]',
      pipe: 'platform: "ensemble"\nmax_batch_size: 0\ninput [{ name: "X", data_type: TYPE_FP32, dims: [1] }]\noutput [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]\nensemble_scheduling { step [{ model_name: "one" model_version: -1 input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } }] }',
    });
    const checked = new Map<string, Awaited<ReturnType<LoadChecks["check"]>>>();
    const checks: LoadChecks = new LoadChecks({
      backends: new BackendRegistry([backend]),
      ready: (name) => {
        const check = checked.get(name);
        return check?.config ? new Map([[1, { config: check.config } as never]]) : undefined;
      },
      loadComposing: async (name, chain) => {
        checked.set(name, await checks.check(await readModelSource(join(root, name)), name, chain));
      },
    });
    const pipe = await checks.check(await readModelSource(join(root, "pipe")), "pipe", []);
    expect(pipe.diagnostics).toEqual([]);
    expect(checked.get("one")?.diagnostics).toEqual([]);
    expect(backend.calls).toEqual(["one"]);
  });
});
