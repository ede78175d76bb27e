import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";

/** Model folders by name across every repository (a name in two repositories has two paths). */
export async function scanRepositories(repositories: readonly string[]): Promise<Map<string, string[]>> {
  const found = new Map<string, string[]>();
  for (const repository of repositories) {
    const entries = await readdir(repository, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      found.set(e.name, [...(found.get(e.name) ?? []), join(repository, e.name)]);
    }
  }
  return found;
}

/** What changes when a model changes on disk: every file's path, size and modification time. */
export async function fingerprintOf(folder: string): Promise<string> {
  const hash = createHash("sha256");
  const walk = async (dir: string, depth: number): Promise<void> => {
    const entries = (await readdir(dir, { withFileTypes: true }).catch(() => [])).sort((a, b) =>
      a.name < b.name ? -1 : 1,
    );
    for (const e of entries) {
      const path = join(dir, e.name);
      if (e.isDirectory()) {
        if (depth < 4) await walk(path, depth + 1);
        continue;
      }
      const info = await stat(path).catch(() => undefined);
      hash.update(`${path}\0${info?.size}\0${info?.mtimeMs}\n`);
    }
  };
  await walk(folder, 0);
  return hash.digest("hex");
}
