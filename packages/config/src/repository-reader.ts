import { readdir, readFile, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import type { ModelSource } from "./model-check.js";
import type { VersionEntry } from "./rules/autofill.js";

/** Folders inside a model folder that are never versions (Triton's `warmup`, `initial_state`, `configs`). */
const SPECIAL_FOLDERS = new Set(["warmup", "initial_state", "configs"]);

/** Options for {@link readModelSource}. */
export interface ReadOptions {
  /** `--model-config-name`: use `configs/<name>.pbtxt` when it exists. */
  configName?: string;
}

/**
 * Read one model folder: its `config.pbtxt` (or `configs/<name>.pbtxt`), its numeric version
 * folders (names with a leading zero are skipped, as in Triton), and the entries of the first
 * folder for backend autofill.
 */
export async function readModelSource(path: string, options: ReadOptions = {}): Promise<ModelSource> {
  const entries = await readdir(path, { withFileTypes: true });
  const folders = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  const versions = folders
    .filter((name) => !SPECIAL_FOLDERS.has(name) && /^(0|[1-9][0-9]*)$/.test(name))
    .map(Number)
    .filter(Number.isSafeInteger);
  let configText: string | undefined;
  let configFile: string | undefined;
  const configs = join(path, "configs");
  const custom = options.configName ? resolve(configs, `${options.configName}.pbtxt`) : undefined;
  // The name is a file in configs/, never a path out of it (`--model-config-name ../x`).
  const inside = custom !== undefined && dirname(custom) === resolve(configs);
  for (const file of [inside ? custom : undefined, join(path, "config.pbtxt")]) {
    if (!file) continue;
    configText = await readFile(file, "utf8").catch(() => undefined);
    configFile = file;
    if (configText !== undefined) break;
  }
  const first = folders[0];
  const firstVersionEntries: VersionEntry[] | undefined = first
    ? (await readdir(join(path, first), { withFileTypes: true })).map((e) => ({
        name: e.name,
        isDirectory: e.isDirectory(),
      }))
    : undefined;
  return {
    name: basename(path),
    path,
    ...(configText === undefined ? {} : { configText }),
    ...(configText !== undefined && custom !== undefined && configFile === custom
      ? { configFile: join(path, "configs", basename(custom)) }
      : {}),
    versions,
    ...(firstVersionEntries ? { firstVersionEntries } : {}),
  };
}

/** Read every model folder of a repository, in name order. Files at the top level are ignored. */
export async function readRepository(path: string, options: ReadOptions = {}): Promise<ModelSource[]> {
  const entries = await readdir(path, { withFileTypes: true });
  const folders = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  return Promise.all(folders.map((name) => readModelSource(join(path, name), options)));
}

/** Whether `path` is a model folder (has `config.pbtxt` or a numeric version folder) rather than a repository. */
export async function isModelFolder(path: string): Promise<boolean> {
  if (
    await stat(join(path, "config.pbtxt")).then(
      (s) => s.isFile(),
      () => false,
    )
  )
    return true;
  const entries = await readdir(path, { withFileTypes: true });
  return entries.some((e) => e.isDirectory() && /^[1-9][0-9]*$/.test(e.name));
}
