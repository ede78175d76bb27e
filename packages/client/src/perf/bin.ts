#!/usr/bin/env node
// The `galley-perf` executable: `galley perf` without the server package.
import { runPerf } from "./cli.js";

process.exitCode = await runPerf(process.argv.slice(2));
