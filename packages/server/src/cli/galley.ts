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
await import("./main.js");
