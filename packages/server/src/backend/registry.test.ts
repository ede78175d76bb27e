import { describe, expect, it } from "vitest";
import type { Backend } from "./backend.js";
import { BackendRegistry } from "./registry.js";

const backend = (name: string, tag: string): Backend & { tag: string } => ({
  name,
  tag,
  load: async () => ({ instances: [], unload: async () => {} }),
});

describe("BackendRegistry", () => {
  const based = new Map([
    ["pytorch", backend("pytorch", "runtime")],
    ["custom", backend("custom", "runtime")],
  ]);
  const registry = new BackendRegistry([backend("pytorch", "native"), backend("python", "python")], (name) =>
    based.get(name),
  );
  const tag = (name: string, runtime?: string) => (registry.get(name, runtime) as { tag: string } | undefined)?.tag;

  it("gives a backend's own runtime unless the config names runtime model.py", () => {
    expect(tag("pytorch")).toBe("native");
    expect(tag("pytorch", "model.py")).toBe("runtime");
    expect(tag("python", "model.py")).toBeUndefined();
  });

  it("falls back to the Python-based runtime for a name with no backend of its own, as Triton does", () => {
    expect(tag("custom")).toBe("runtime");
    expect(tag("custom", "libtriton_custom.so")).toBeUndefined();
    expect(registry.has("custom")).toBe(true);
    expect(registry.has("other")).toBe(false);
    expect([...registry.names()].sort()).toEqual(["python", "pytorch"]);
  });
});
