import { InferenceError } from "../base/errors.js";

/**
 * Refuse a model name that could not be a folder of the repository, before anything is written,
 * read or deleted in its name: Triton's checks (empty, only whitespace, `..`, `/`) and, because
 * Galley also runs where `\` separates paths and C strings end at NUL, `\`, NUL and a leading `.`.
 *
 * @throws {@link InferenceError} with Triton's texts.
 */
export function validateModelName(name: string): void {
  if (name === "") throw new InferenceError("MODEL_NAME_EMPTY");
  if (/^[ \t\n\v\f\r]+$/.test(name)) throw new InferenceError("MODEL_NAME_WHITESPACE");
  if (name.includes("..") || /[/\\\0]/.test(name) || name.startsWith(".")) {
    throw new InferenceError("MODEL_NAME_TRAVERSAL", { model: name.replaceAll("\0", "\\0") });
  }
}
