// pb_utils and the stub's allocator tested in Python itself (python/tests, unittest), with the
// interpreter the other Python backend tests use.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { pythonWithNumpy } from "./python-harness.js";

const PYTHON_DIR = fileURLToPath(new URL("../python", import.meta.url));

describe("triton_python_backend_utils in Python", () => {
  it("passes its unittest suite", async () => {
    const python = pythonWithNumpy();
    const { code, output } = await new Promise<{ code: number; output: string }>((resolve) => {
      execFile(
        python,
        ["-m", "unittest", "discover", "-s", "tests", "-v"],
        { cwd: PYTHON_DIR, env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" } },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
      );
    });
    expect(output).toMatch(/Ran \d+ tests/);
    expect(code, output).toBe(0);
    // The whole suite in one interpreter (torch's import alone takes seconds on a busy CI machine).
  }, 60_000);
});
