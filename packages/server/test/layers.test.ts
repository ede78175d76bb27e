// The server's layers (docs/guides/development.md, "the map"): frontends reach models only
// through the core, the core speaks no protocol, backends know nothing of scheduling. Read from
// the sources' import statements, so a new file that crosses a layer fails here.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const SRC = fileURLToPath(new URL("../src", import.meta.url));

/** Every non-test source file under `folder`, relative to src/. */
function sources(folder: string): string[] {
  const root = join(SRC, folder);
  return readdirSync(root, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts") && !f.endsWith(".d.ts"))
    .map((f) => relative(SRC, join(root, f)));
}

/** What `file` imports: package names as written, relative paths resolved to src/-relative ones. */
function imports(file: string): string[] {
  const text = readFileSync(join(SRC, file), "utf8");
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"/g)].map(([, spec = ""]) =>
    spec.startsWith(".") ? relative(SRC, resolve(dirname(join(SRC, file)), spec)) : spec,
  );
}

/** `file → import` pairs of `folder`'s sources whose import matches `forbidden`. */
function crossings(folder: string, forbidden: RegExp): string[] {
  return sources(folder).flatMap((file) =>
    imports(file)
      .filter((spec) => forbidden.test(spec))
      .map((spec) => `${file} → ${spec}`),
  );
}

describe("the server's layers", () => {
  it("finds the imports it checks (the scan itself works)", () => {
    expect(imports("frontend/http/infer-route.ts")).toContain("core/errors.js");
    expect(crossings("frontend", /^core\//).length).toBeGreaterThan(0);
  });

  it("the core imports nothing from frontend/ or scheduler/, and no protocol library", () => {
    expect(crossings("core", /^(frontend|scheduler)\/|^@connectrpc\//)).toEqual([]);
  });

  it("frontends import nothing from repository/, scheduler/ or backend/, and never use server.models", () => {
    expect(crossings("frontend", /^(repository|scheduler|backend)\//)).toEqual([]);
    const reaching = sources("frontend").filter((f) => /\bserver\.models\b/.test(readFileSync(join(SRC, f), "utf8")));
    expect(reaching).toEqual([]);
  });

  it("backends import nothing from scheduler/ or frontend/", () => {
    expect(crossings("backend", /^(scheduler|frontend)\//)).toEqual([]);
  });
});
