// The server's layers (docs/guides/development.md, "the map") as an allowed-imports matrix, read
// from the sources' import statements: a new file that imports across a layer, or a folder that
// imports one that imports it back, fails here.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const SRC = fileURLToPath(new URL("../src", import.meta.url));

/**
 * Each layer, and the layers its files may import (besides their own). A layer is a folder (or
 * a file) under src/; the longest that holds a file is its layer. Packages (`@galley/*`, Node's,
 * libraries) are not layers: what each layer may use of them is checked apart below.
 */
const MATRIX: Record<string, readonly string[]> = {
  // The ground every layer stands on: errors, tensors, requests, datatypes, statistics, trace
  // context, clock, log.
  base: [],
  // What a scripted model implements (`@galley/server/model`): types only.
  model: [],
  // The backend contract, and what backends share: the instance host (worker thread, child
  // process, native thread).
  backend: ["base"],
  "backend/host": ["base"],
  // What the scripted backends (JS and Python) share: BLS calls, their wire format.
  "backend/scripted": ["base", "backend"],
  // Backends, each a plug-in: the contract, the host, the ground; never another backend.
  "backend/js": ["base", "model", "backend", "backend/host", "backend/scripted"],
  "backend/python": ["base", "backend", "backend/host", "backend/scripted"],
  "backend/onnxruntime": ["base", "backend", "backend/host"],
  "backend/pytorch": ["base", "backend", "backend/host"],
  cache: ["base"],
  scheduler: ["base", "backend"],
  "scheduler/sequence": ["base", "backend", "scheduler"],
  // A loaded model: config, backend, scheduler; its versions and the load pipeline.
  repository: ["base", "backend", "cache", "scheduler", "scheduler/sequence"],
  // The facade and the request pipeline.
  core: ["base", "backend", "cache", "repository", "scheduler"],
  // Sockets: HTTP/1 (lean and Node's server), HTTP/2; limits, turns.
  "frontend/transport": ["base"],
  // Video jobs (store, runner, webhooks): beside the frontends, a client of the core.
  jobs: ["base", "core"],
  // Protocols over the core.
  "frontend/http": ["base", "core", "frontend/transport"],
  // The videos API over the jobs; OpenAI's error shape, Triton's status table.
  "frontend/videos": ["base", "core", "jobs", "frontend/transport", "frontend/http"],
  "frontend/grpc": ["base", "core"],
  "frontend/metrics": ["base", "core", "frontend/transport"],
  // Wiring: may import anything.
  "server.ts": ["*"],
  "gpus.ts": ["base"],
  // NVML and the PyTorch allocator as the GPU memory reader (accounting, budget, admission).
  "gpu-memory.ts": ["base"],
  // Which endpoint would not bind, in Triton's words (before models load).
  "endpoint-error.ts": ["base"],
  "index.ts": ["*"],
  "internal.ts": ["*"],
  cli: ["*"],
};

/** Every non-test source file under src/, relative to it. */
function sources(): string[] {
  return readdirSync(SRC, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts") && !f.endsWith(".d.ts"))
    .sort();
}

/** What `file` imports: package names as written, relative paths resolved to src/-relative ones. */
function imports(file: string): string[] {
  const text = readFileSync(join(SRC, file), "utf8");
  // Static imports and re-exports, and `import("…")` (in type positions or loaded lazily).
  const specs = [
    ...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"/g),
    ...text.matchAll(/\bimport\(\s*"([^"]+)"\s*\)/g),
  ].map(([, spec = ""]) => spec);
  return specs.map((spec) => (spec.startsWith(".") ? relative(SRC, resolve(dirname(join(SRC, file)), spec)) : spec));
}

/** The layer of a src/-relative path: the longest key of {@link MATRIX} that holds it. */
function layerOf(path: string): string | undefined {
  let best: string | undefined;
  for (const layer of Object.keys(MATRIX)) {
    const holds = layer.endsWith(".ts") ? path.replace(/\.js$/, ".ts") === layer : path.startsWith(`${layer}/`);
    if (holds && (best === undefined || layer.length > best.length)) best = layer;
  }
  return best;
}

/** Every `file → import` the matrix forbids. */
function crossings(): string[] {
  const out: string[] = [];
  for (const file of sources()) {
    const from = layerOf(file);
    if (from === undefined) {
      out.push(`${file}: in no layer (add its folder to the matrix)`);
      continue;
    }
    const allowed = MATRIX[from] ?? [];
    for (const target of imports(file)) {
      if (!target.endsWith(".js")) continue;
      const to = layerOf(target);
      if (to === from || allowed.includes("*") || (to !== undefined && allowed.includes(to))) continue;
      out.push(`${file} → ${target}`);
    }
  }
  return out;
}

/** Folder → the folders its files import (each folder under src/ a node, files at the top by name). */
function folderGraph(): Map<string, Set<string>> {
  const folder = (path: string) => (path.includes("/") ? dirname(path) : path.replace(/\.js$/, ".ts"));
  const graph = new Map<string, Set<string>>();
  for (const file of sources()) {
    const from = folder(file);
    for (const target of imports(file)) {
      if (!target.endsWith(".js") || target.startsWith("..")) continue;
      const to = folder(target);
      if (to === from) continue;
      if (!graph.has(from)) graph.set(from, new Set());
      graph.get(from)?.add(to);
    }
  }
  return graph;
}

/** The cycles of `graph`, each as the folders on it (Tarjan's strongly connected components of more than one). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  let index = 0;
  const indices = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string) => {
    indices.set(node, index);
    low.set(node, index++);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!indices.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node) as number, low.get(next) as number));
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node) as number, indices.get(next) as number));
    }
    if (low.get(node) === indices.get(node)) {
      const component: string[] = [];
      let top: string | undefined;
      do {
        top = stack.pop() as string;
        onStack.delete(top);
        component.push(top);
      } while (top !== node);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const node of graph.keys()) if (!indices.has(node)) visit(node);
  return found;
}

describe("the server's layers", () => {
  it("finds the imports it checks (the scan itself works)", () => {
    expect(imports("frontend/http/infer-route.ts")).toContain("base/errors.js");
    expect(layerOf("frontend/http/infer-route.ts")).toBe("frontend/http");
    expect(layerOf("backend/backend.ts")).toBe("backend");
    expect(layerOf("server.ts")).toBe("server.ts");
    // A crossing the matrix forbids is found: the JS backend's own imports, judged as base's.
    const js = imports("backend/js/js-backend.ts").filter((t) => t.endsWith(".js") && layerOf(t) !== "base");
    expect(js.length).toBeGreaterThan(0);
  });

  it("every import follows the matrix (development.md's map)", () => {
    expect(crossings()).toEqual([]);
  });

  it("no folder imports one that imports it back, through any number of folders", () => {
    const graph = folderGraph();
    expect(graph.size).toBeGreaterThan(10);
    expect(cycles(graph)).toEqual([]);
    // The check finds a cycle when there is one.
    const looped = new Map(graph);
    looped.set("base", new Set(["core"]));
    expect(cycles(looped).length).toBeGreaterThan(0);
  });

  it("the core speaks no protocol, and frontends reach models only through the core", () => {
    const packages = (prefix: string) =>
      sources()
        .filter((f) => f.startsWith(prefix))
        .flatMap((f) => imports(f).map((t) => `${f} → ${t}`));
    expect(packages("core/").filter((c) => /→ @connectrpc\//.test(c))).toEqual([]);
    expect(packages("base/").filter((c) => /→ @connectrpc\//.test(c))).toEqual([]);
    const reaching = sources().filter(
      (f) => f.startsWith("frontend/") && /\bserver\.models\b/.test(readFileSync(join(SRC, f), "utf8")),
    );
    expect(reaching).toEqual([]);
  });
});
