import { InferenceError } from "../base/errors.js";

/**
 * Refuse a model name that could not be a folder of the repository, before anything is written,
 * read or deleted in its name: Triton's checks (empty, only whitespace, `..`, `/`) and, because C
 * strings end at NUL, NUL and a leading `.` too. Where `\` separates paths (Windows) it is refused
 * as well; elsewhere it is an ordinary character, as in Triton (the Python backend then refuses
 * it, with the shell's other metacharacters, in a stub's name).
 *
 * @throws {@link InferenceError} with Triton's texts.
 */
export function validateModelName(name: string, platform: NodeJS.Platform = process.platform): void {
  if (name === "") throw new InferenceError("MODEL_NAME_EMPTY");
  if (/^[ \t\n\v\f\r]+$/.test(name)) throw new InferenceError("MODEL_NAME_WHITESPACE");
  const separators = platform === "win32" ? /[/\\\0]/ : /[/\0]/;
  if (name.includes("..") || separators.test(name) || name.startsWith(".")) {
    throw new InferenceError("MODEL_NAME_TRAVERSAL", { model: name.replaceAll("\0", "\\0") });
  }
}
