// What the Python backend's tests share: an interpreter that has numpy (PATH's python3, then
// Debian's /usr/bin/python3), the fixture models, and checks that nothing is left behind.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** Fixture models of Triton's Python backend. */
export const PYTHON_FIXTURES = fileURLToPath(new URL("./fixtures/python", import.meta.url));

let found: string | undefined;
let foundPath = "";

/**
 * The first of `python3` (PATH) and `/usr/bin/python3` that imports numpy. Throws when neither
 * does: these tests need a real interpreter and never skip.
 */
export function pythonWithNumpy(): string {
  if (found) return found;
  const tried: string[] = [];
  for (const candidate of ["python3", "/usr/bin/python3"]) {
    try {
      const out = execFileSync(candidate, ["-c", "import numpy, sys; print(sys.executable, numpy.__version__)"], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      });
      found = candidate;
      foundPath = out.trim().split(" ")[0] ?? candidate;
      process.stderr.write(`python backend tests use ${out.trim()}\n`);
      return candidate;
    } catch (error) {
      tried.push(`${candidate}: ${(error as Error).message.split("\n")[0]}`);
    }
  }
  throw new Error(
    `the Python backend tests need python3 with numpy (apt-get install python3 python3-numpy); tried ${tried.join("; ")}`,
  );
}

/** The absolute path of {@link pythonWithNumpy}'s interpreter (`sys.executable`). */
export function pythonPath(): string {
  pythonWithNumpy();
  return foundPath;
}

/** Copy fixture models into `repo`. */
export function copyPythonModels(repo: string, models: readonly string[]): void {
  for (const model of models) cpSync(join(PYTHON_FIXTURES, model), join(repo, model), { recursive: true });
}

/**
 * An interpreter in `repo` (`<repo>/python3`) whose numpy cannot be imported: the real one with
 * a package named numpy first on its path that raises ImportError.
 */
export function pythonWithoutNumpy(repo: string): string {
  mkdirSync(join(repo, "fake", "numpy"), { recursive: true });
  writeFileSync(join(repo, "fake", "numpy", "__init__.py"), 'raise ImportError("No module named numpy")\n');
  const interpreter = join(repo, "python3");
  writeFileSync(interpreter, `#!/bin/sh\nPYTHONPATH=${join(repo, "fake")}:$PYTHONPATH exec ${pythonPath()} "$@"\n`, {
    mode: 0o755,
  });
  return interpreter;
}

/** The Python backend's files in /dev/shm. */
export function shmLeftovers(): string[] {
  return readdirSync("/dev/shm").filter((n) => n.startsWith("triton_python_backend_shm_region_"));
}

/** Processes running the Galley stub, with their parents. */
export function stubProcesses(): { pid: number; ppid: number }[] {
  const out: { pid: number; ppid: number }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (!cmdline.includes("galley_python_stub.py")) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      out.push({ pid: Number(entry), ppid });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}
