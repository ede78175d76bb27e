import { lstat, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve, sep } from "node:path";
import { InferenceError } from "../base/errors.js";
import { validateModelName } from "./model-name.js";

const PREFIX = "galley-model-";

/**
 * Write a load request's `file:<version>/<path>` overrides into a private temporary model
 * folder (mode 0700), `<tmp>/galley-model-XXXXXX/<model>`. Every path is joined to that folder
 * (a leading slash included, as Triton's `JoinPath`), resolved, and must stay
 * inside that folder (Triton's rule and text); nothing is written until all of them are checked,
 * and a failure removes what was made. Returns the model folder; remove it with
 * {@link removeFileOverrides}.
 *
 * @throws {@link InferenceError} for a bad model name or a path outside the folder.
 */
export async function writeFileOverrides(model: string, files: ReadonlyMap<string, Uint8Array>): Promise<string> {
  validateModelName(model);
  const root = await mkdtemp(join(tmpdir(), PREFIX));
  const folder = join(root, model);
  try {
    const targets: [string, string, Uint8Array][] = [];
    for (const [name, data] of files) {
      const relative = name.slice("file:".length);
      // Joined as Triton's JoinPath joins it: a leading slash is the model folder's root, not
      // the file system's (`file:/1/model.py` is `1/model.py`); `..` is resolved, then checked.
      const path = resolve(`${folder}/${relative}`);
      if (relative.includes("\0") || !path.startsWith(folder + sep)) {
        throw new InferenceError("FILE_OVERRIDE_ESCAPES", { name: name.replaceAll("\0", "\\0"), path });
      }
      targets.push([name, path, data]);
    }
    for (const [name, path, data] of targets) {
      try {
        await mkdir(dirname(path), { recursive: true, mode: 0o700 });
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ENOTDIR" || code === "EEXIST") {
          throw new InferenceError("FILE_OVERRIDE_DIRECTORY_IS_FILE", { name });
        }
        throw error;
      }
      if ((await lstat(path).catch(() => undefined))?.isDirectory()) {
        throw new InferenceError("FILE_OVERRIDE_DIRECTORY_IS_FILE", { name });
      }
      await writeFile(path, data, { mode: 0o600 });
    }
  } catch (error) {
    await rm(root, { recursive: true, force: true });
    throw error;
  }
  return folder;
}

/**
 * Remove a folder made by {@link writeFileOverrides}, with the temporary folder around it. Any
 * other path is refused, so a bad name can never make this delete something else.
 */
export async function removeFileOverrides(folder: string): Promise<void> {
  const root = dirname(folder);
  if (dirname(root) !== resolve(tmpdir()) || !basename(root).startsWith(PREFIX) || resolve(folder) !== folder) {
    throw new Error(`refusing to remove '${folder}': not a folder of file overrides`);
  }
  await rm(root, { recursive: true, force: true });
}
