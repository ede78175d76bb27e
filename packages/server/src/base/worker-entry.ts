/**
 * The compiled entry file of a worker thread, given relative to the module that starts it:
 * `workerEntry("./js-worker.js", import.meta.url)`. Built code (`dist/`) finds it beside itself.
 * Sources run by vitest or tsx are `.ts` files under `src/`, and a worker needs JavaScript, so
 * from a `.ts` module the last `src/` segment of the path becomes `dist/`: tsc writes the same
 * tree there (run the build before tests that start workers).
 */
export function workerEntry(relative: string, from: string | URL): URL {
  const entry = new URL(relative, from);
  if (!/\.[cm]?ts$/.test(new URL(from).pathname)) return entry;
  const path = entry.pathname;
  const at = path.lastIndexOf("/src/");
  if (at < 0) throw new Error(`${entry.href} is not under a src/ folder, so its built file cannot be found`);
  entry.pathname = `${path.slice(0, at)}/dist/${path.slice(at + "/src/".length)}`;
  return entry;
}
