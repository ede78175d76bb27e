import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, normalize, sep } from "node:path";
import { InferenceError } from "../core/errors.js";

/**
 * Write a load request's `file:<version>/<path>` overrides into a private temporary model
 * folder (mode 0700). A path that is absolute or escapes the folder is rejected before anything
 * is written. Returns the folder; the caller removes it when the model is unloaded.
 */
export async function writeFileOverrides(model: string, files: ReadonlyMap<string, Uint8Array>): Promise<string> {
  const targets: [string, Uint8Array][] = [];
  for (const [name, data] of files) {
    const relative = name.slice("file:".length);
    const clean = normalize(relative);
    if (
      relative === "" ||
      isAbsolute(relative) ||
      clean === ".." ||
      clean.startsWith(`..${sep}`) ||
      relative.includes("\0")
    ) {
      throw new InferenceError("FILE_OVERRIDE_ESCAPES", { name });
    }
    targets.push([clean, data]);
  }
  const root = await mkdtemp(join(tmpdir(), "galley-model-"));
  const folder = join(root, model);
  try {
    for (const [relative, data] of targets) {
      const path = join(folder, relative);
      await mkdir(dirname(path), { recursive: true, mode: 0o700 });
      await writeFile(path, data, { mode: 0o600 });
    }
  } catch (error) {
    await rm(root, { recursive: true, force: true });
    throw error;
  }
  return folder;
}

/** Remove a folder made by {@link writeFileOverrides}. */
export async function removeFileOverrides(folder: string): Promise<void> {
  await rm(dirname(folder), { recursive: true, force: true });
}
