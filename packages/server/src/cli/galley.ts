#!/usr/bin/env node
// The `galley` command's entry. Node's on-disk compile cache is turned on before anything else is
// imported: the server's modules are then compiled once per Node version, not at every start (a
// fifth of start-up CPU). NODE_DISABLE_COMPILE_CACHE=1 turns it off, NODE_COMPILE_CACHE=<dir>
// chooses its folder (the default is under the system's temporary folder).
import module from "node:module";

// Node 20 has no compile cache; a cache that cannot be opened (a read-only /tmp) is only skipped.
const cache = (module as { enableCompileCache?: () => { directory?: string } }).enableCompileCache?.();
// Scripted-model worker threads turn it on for themselves from the environment they inherit.
if (cache?.directory && !process.env.NODE_COMPILE_CACHE) process.env.NODE_COMPILE_CACHE = cache.directory;
// `galley serve` caps V8's young generation (docs/guides/serving.md, "Memory under load"). The
// flag only takes effect at start, so the process replaces itself once with it (same pid, same
// stdio) unless the command line or NODE_OPTIONS already sizes it; Node 20 has no `execve`.
const semiSpace = "--max-semi-space-size";
const execve = (process as { execve?: (file: string, args: string[], env: NodeJS.ProcessEnv) => never }).execve;
if (
  process.argv[2] === "serve" &&
  execve &&
  !process.execArgv.some((flag) => flag.startsWith(semiSpace)) &&
  !process.env.NODE_OPTIONS?.includes(semiSpace)
) {
  execve(
    process.execPath,
    [process.execPath, `${semiSpace}=8`, ...process.execArgv, ...process.argv.slice(1)],
    process.env,
  );
}
await import("./main.js");
