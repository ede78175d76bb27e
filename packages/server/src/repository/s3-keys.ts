import { resolve, sep } from "node:path";

/** The deepest folder a downloaded model may have below its own (a version's files and folders). */
export const MAX_KEY_DEPTH = 16;
/** S3's own limit on a key, in UTF-8 bytes. */
const MAX_KEY_BYTES = 1024;

/**
 * Where an object of a model lands in the model's private copy, or why it may not: `relative` is
 * the key with the model's prefix taken off. Refused: NUL, backslashes, an absolute key, empty,
 * `.` or `..` segments, keys longer than S3 allows or deeper than {@link MAX_KEY_DEPTH}; and any
 * path that would resolve outside `folder` however the checks above were passed. A key ending in
 * `/` is a folder marker (what S3 consoles make for an empty folder): its path is the folder.
 */
export function objectPath(folder: string, relative: string): { path: string } | { problem: string } {
  if (relative.includes("\0")) return { problem: "it holds a NUL character" };
  if (relative.includes("\\")) return { problem: "it holds a backslash" };
  if (relative.startsWith("/")) return { problem: "it is an absolute path" };
  if (Buffer.byteLength(relative) > MAX_KEY_BYTES) return { problem: `it is longer than ${MAX_KEY_BYTES} bytes` };
  const segments = (relative.endsWith("/") ? relative.slice(0, -1) : relative).split("/");
  if (segments.some((s) => s === "" || s === "." || s === "..")) {
    return { problem: "it has an empty, '.' or '..' path segment" };
  }
  if (segments.length > MAX_KEY_DEPTH) return { problem: `it is more than ${MAX_KEY_DEPTH} folders deep` };
  const path = resolve(folder, ...segments);
  if (!path.startsWith(folder + sep)) return { problem: "it resolves outside the model's folder" };
  return { path };
}
