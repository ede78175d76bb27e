#!/usr/bin/env node
// `npm test` needs more than Node: the Python backend's suites run models under python3 with
// numpy, the PyTorch suites need libtorch (the addon links the one inside the torch wheel) and
// python torch to make their fixtures. This script makes that environment itself, in `.test-python/`
// at the repository's root, from python3 and pip (whatever index pip is configured with), then runs
// the command it is given with `.test-python/bin` first on PATH:
//
//   node scripts/test-env.mjs nx run-many -t test
//
// GALLEY_TEST_PYTHON=<python3 with numpy and torch> uses that interpreter instead of making one.
// The environment is made again when REQUIREMENTS below change. Without python3 (3.9 or newer, with
// its venv module), it says what to install and exits 1: the suites that need it fail, never skip.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** What the suites need: numpy for the Python backend, torch (CPU is enough) for the rest. */
const REQUIREMENTS = ["numpy", "torch==2.13.0"];

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const venv = join(root, ".test-python");
const bin = join(venv, "bin");
const marker = join(venv, "galley-test-env.json");

function fail(message) {
  console.error(`test-env: ${message}`);
  process.exit(1);
}

function run(command, args, options = {}) {
  return execFileSync(command, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...options });
}

/** The interpreter the suites use: GALLEY_TEST_PYTHON's, else the venv's (made here when needed). */
function python() {
  const given = process.env.GALLEY_TEST_PYTHON;
  if (given) {
    try {
      run(given, ["-c", "import numpy, torch"]);
    } catch {
      fail(`GALLEY_TEST_PYTHON=${given} does not import numpy and torch`);
    }
    return dirname(given);
  }
  const wanted = JSON.stringify({ requirements: REQUIREMENTS });
  if (existsSync(marker) && readFileSync(marker, "utf8") === wanted) return bin;
  let version;
  try {
    version = run("python3", ["-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"]).trim();
  } catch {
    fail(
      "the Python and PyTorch suites need python3 (3.9 or newer) with its venv module, and none was found:\n" +
        "  Debian/Ubuntu: apt-get install python3 python3-venv\n" +
        "or set GALLEY_TEST_PYTHON to a python3 that imports numpy and torch.",
    );
  }
  const [major, minor] = version.split(".").map(Number);
  if (major < 3 || (major === 3 && minor < 9)) fail(`python3 is ${version}; the suites need 3.9 or newer`);
  console.log(`test-env: making ${venv} (python ${version}, ${REQUIREMENTS.join(", ")}); once, a few minutes`);
  rmSync(venv, { recursive: true, force: true });
  try {
    run("python3", ["-m", "venv", venv], { stdio: "inherit" });
    // --retries 0: an index that cannot be reached (an offline machine with a local index
    // configured) is passed over at once instead of after a minute of retries.
    run(join(bin, "python3"), ["-m", "pip", "install", "--quiet", "--retries", "0", ...REQUIREMENTS], {
      stdio: "inherit",
    });
    run(join(bin, "python3"), ["-c", "import numpy, torch"]);
  } catch (error) {
    rmSync(venv, { recursive: true, force: true });
    fail(`could not make ${venv}: ${error.message.split("\n")[0]} (pip's output is above)`);
  }
  writeFileSync(marker, wanted);
  return bin;
}

const [command, ...args] = process.argv.slice(2);
if (!command) fail("usage: node scripts/test-env.mjs <command> [args...]");
const pythonBin = python();
const env = { ...process.env, PATH: `${pythonBin}${delimiter}${process.env.PATH ?? ""}` };
if (!process.env.GALLEY_TEST_PYTHON) env.VIRTUAL_ENV = venv;
const child = spawn(command, args, { cwd: root, env, stdio: "inherit", shell: false });
const forward = (signal) => child.kill(signal);
process.on("SIGINT", forward).on("SIGTERM", forward);
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
child.on("error", (error) => fail(`${command}: ${error.message}`));
