#!/usr/bin/env node
// The `galley` command. In a checkout of the repository `npm install` runs no scripts (see
// .npmrc), so the TypeScript may not be built yet: build it once, then run. An installed package
// ships dist/ and goes straight to it.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const cli = new URL("../dist/cli/galley.js", import.meta.url);
if (!existsSync(cli) && existsSync(new URL("../src/cli/galley.ts", import.meta.url))) {
  const root = fileURLToPath(new URL("../../..", import.meta.url));
  process.stderr.write("galley: first run in this checkout: building the packages (npm run build)\n");
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const build = spawnSync(npm, ["run", "build", "--silent"], { cwd: root, stdio: ["ignore", 2, 2] });
  if (build.status !== 0) {
    process.stderr.write(
      `galley: the build failed (exit ${build.status ?? build.signal}); run 'npm run build' to see why\n`,
    );
    process.exit(1);
  }
}
await import(cli.href);
