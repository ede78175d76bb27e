#!/usr/bin/env node
// The `galley-video` command. The example runs from its TypeScript source (through tsx); in a
// checkout where the packages are not built yet, build them once first (as `galley` does).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const built = (() => {
  try {
    return existsSync(require.resolve("@galley/client"));
  } catch {
    return false;
  }
})();
if (!built) {
  const root = fileURLToPath(new URL("../../..", import.meta.url));
  process.stderr.write("galley-video: first run in this checkout: building the packages (npm run build)\n");
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const build = spawnSync(npm, ["run", "build", "--silent"], { cwd: root, stdio: ["ignore", 2, 2] });
  if (build.status !== 0) {
    process.stderr.write(
      `galley-video: the build failed (exit ${build.status ?? build.signal}); run 'npm run build' to see why\n`,
    );
    process.exit(1);
  }
}
const { tsImport } = await import("tsx/esm/api");
const { runCli } = await tsImport("../src/cli.ts", import.meta.url);
const controller = new AbortController();
// Ctrl-C cancels the request on the server; a second one exits at once.
process.once("SIGINT", () => {
  controller.abort();
  process.once("SIGINT", () => process.exit(130));
});
process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  signal: controller.signal,
});
