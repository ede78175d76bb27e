// The install script of the published package: builds the addons from native/ with node-gyp
// (npm's own, which npm names in npm_config_node_gyp), on the user's machine, downloading nothing
// but the Node.js headers node-gyp needs (none where npm_config_nodedir points at them). In this
// repository `npm install` runs no install scripts (.npmrc); `npm run build` builds the addons.
//
// The addons are optional: the server runs without them (no zero-copy shared memory, CUDA IPC,
// GPU metrics or PyTorch backend). So a failed build warns and lets the install go on; loading the
// addon later fails with one message that lists what was tried and how to build it.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const say = (line) => process.stderr.write(`@galley/backends-native: ${line}\n`);

if (process.env.GALLEY_SKIP_NATIVE_BUILD) {
  say("GALLEY_SKIP_NATIVE_BUILD is set: the native addon is not built");
  process.exit(0);
}

function nodeGyp() {
  if (process.env.npm_config_node_gyp) return process.env.npm_config_node_gyp;
  try {
    return createRequire(import.meta.url).resolve("node-gyp/bin/node-gyp.js");
  } catch {
    return undefined;
  }
}

const gyp = nodeGyp();
const build = gyp
  ? spawnSync(process.execPath, [gyp, "rebuild"], { cwd: root, stdio: "inherit" })
  : { status: null, error: new Error("node-gyp not found (run this through npm, which brings its own)") };
if (build.status === 0) {
  say("native addon built");
} else {
  const why = build.error ? build.error.message : `node-gyp rebuild exited ${build.status ?? build.signal}`;
  say(`the native addon was not built: ${why}.`);
  say("Galley runs without it (no zero-copy shared memory, CUDA IPC, GPU metrics or PyTorch backend).");
  say("To build it: install a C++17 compiler, make and python3, then run `npm rebuild @galley/backends-native`.");
}
