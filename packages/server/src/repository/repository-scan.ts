import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { ModelRepository } from "./model-repository.js";

/**
 * Model folders by name across every repository (a name in two repositories has two). A folder
 * repository that cannot be read has no models; an object store whose listing fails fails the
 * scan, so a poll during an outage unloads nothing.
 */
export async function scanRepositories(
  repositories: readonly ModelRepository[],
): Promise<Map<string, ModelRepository[]>> {
  const found = new Map<string, ModelRepository[]>();
  for (const repository of repositories) {
    for (const name of await repository.models()) found.set(name, [...(found.get(name) ?? []), repository]);
  }
  return found;
}

/** The sub-folders of a folder (none when it cannot be read). */
export async function modelFolders(repository: string): Promise<string[]> {
  const entries = await readdir(repository, { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isDirectory()).map((e) => e.name);
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
