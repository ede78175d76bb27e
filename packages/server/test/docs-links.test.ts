// Every relative link in the repository's Markdown (README.md, docs/, the examples', packages' and
// benchmarks' pages) names a file or folder that exists. Anchors are checked by typedoc in
// `npm run docs`, which renders these pages (typedoc.json's projectDocuments).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../../..", import.meta.url));

function markdownFiles(): string[] {
  const files = ["README.md", "bench/README.md"];
  const under = (dir: string, keep: (path: string) => boolean) => {
    for (const entry of readdirSync(join(root, dir), { recursive: true, encoding: "utf8" })) {
      const path = join(dir, entry);
      if (path.endsWith(".md") && !/(^|\/)(node_modules|dist|api|build)\//.test(path) && keep(path)) files.push(path);
    }
  };
  under("docs", () => true);
  under("bench/results", () => true);
  under("examples", (path) => path.endsWith("README.md") || path.includes("/licenses/"));
  for (const dir of ["proto", ...readdirSync(join(root, "packages")).map((p) => `packages/${p}`), "deploy"]) {
    if (existsSync(join(root, dir, "README.md"))) files.push(`${dir}/README.md`);
  }
  return files;
}

/** Relative link targets in a Markdown text, outside code blocks and code spans. */
function relativeLinks(text: string): string[] {
  const prose = text.replace(/^```[\s\S]*?^```/gm, "").replace(/`[^`\n]*`/g, "");
  const links: string[] = [];
  for (const [, target = ""] of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    if (!/^[a-z]+:|^#/.test(target)) links.push(target.replace(/#.*$/, ""));
  }
  return links;
}

describe("the repository's Markdown", () => {
  const files = markdownFiles();

  it("includes the pages a reader starts from", () => {
    expect(files).toEqual(expect.arrayContaining(["README.md", "docs/README.md", "bench/README.md"]));
  });

  it.each(files)("%s: every relative link names a file that exists", (file) => {
    const text = readFileSync(join(root, file), "utf8");
    const missing = relativeLinks(text).filter((target) => !existsSync(join(root, dirname(file), target)));
    expect(missing.map((target) => relative(root, join(root, dirname(file), target)))).toEqual([]);
  });
});
