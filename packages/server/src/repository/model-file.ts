import { isAbsolute, join, normalize, sep } from "node:path";

/**
 * The path of a file a config names inside one of the model's folders (`warmup/`,
 * `initial_state/`). A name that is absolute or climbs out of that folder is refused, so a
 * config cannot make the server read arbitrary files.
 *
 * @throws Error naming the field and the file.
 */
export function modelFile(modelPath: string, folder: string, name: string, field: string): string {
  const clean = normalize(name);
  if (name === "" || isAbsolute(name) || clean === ".." || clean.startsWith(`..${sep}`) || name.includes("\0")) {
    throw new Error(`${field} '${name}' must name a file inside the model's '${folder}' folder`);
  }
  return join(modelPath, folder, clean);
}
