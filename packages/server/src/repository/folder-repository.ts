import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { ModelCopy, ModelRepository } from "./model-repository.js";

/** A repository on the local file system: models are read where they are. */
export class FolderRepository implements ModelRepository {
  readonly location: string;

  constructor(location: string) {
    this.location = location;
  }

  async check(): Promise<void> {
    const info = await stat(this.location).catch(() => undefined);
    if (!info?.isDirectory())
      throw new Error(`failed to stat model repository path '${this.location}': not a directory`);
  }

  models(): Promise<string[]> {
    return modelFolders(this.location);
  }

  fingerprint(name: string): Promise<string> {
    return fingerprintOf(join(this.location, name));
  }

  async fetch(name: string): Promise<ModelCopy> {
    const path = join(this.location, name);
    return { path, fingerprint: await fingerprintOf(path) };
  }
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
