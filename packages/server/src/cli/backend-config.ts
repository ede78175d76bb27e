// `--backend-config`: tritonserver's `<backend>,<setting>=<value>` (or a global `<setting>=<value>`),
// each setting handed to its backend, which reads the ones it knows. Galley applies the settings
// that mean something here, checks and accepts the Python backend's others as Triton's Python
// backend does (so command lines written for tritonserver start), and says which it does not use.

import { statSync } from "node:fs";
import { join } from "node:path";
import { GALLEY_BACKEND_NAMES } from "@galley/config";
import type { JsIsolation } from "../backend/js/js-backend.js";

/** Whether `<directory>/<name>/model.py` is a file: a Python-based backend, as Triton finds one. */
function pythonBased(directory: string | undefined, name: string): boolean {
  if (!directory || /[/\\\0]/.test(name) || name === "..") return false;
  try {
    return statSync(join(directory, name, "model.py")).isFile();
  } catch {
    return false;
  }
}

/** What the `--backend-config` settings of a command line set. */
export interface BackendConfig {
  /** `onnxruntime,default-max-batch-size=<n>`, or the global `default-max-batch-size=<n>`. */
  onnxDefaultMaxBatchSize?: number;
  /** `python,python-executable=<path>` (Galley's own). */
  pythonExecutable?: string;
  /** `js,default-isolation=<thread|shared>` (Galley's own). */
  jsDefaultIsolation?: JsIsolation;
  /** One line per setting accepted but not used here, to log at startup. */
  warnings: string[];
}

/** A whole number at least `min` (as `std::stol` reads it), or why not. */
const atLeast =
  (key: string, min: number, message: string) =>
  (value: string): string | undefined => {
    const match = /^\s*[+-]?\d+/.exec(value);
    if (!match) return `${key} must be an integer`;
    return Number(match[0]) < min ? message : undefined;
  };

/** The value check Triton's Python backend makes of each setting it reads (`python_be.cc`), or null for none. */
const PYTHON_SETTINGS: Record<string, ((value: string) => string | undefined) | null> = {
  "shm-default-byte-size": atLeast(
    "shm-default-byte-size",
    1024 * 1024,
    "shm-default-byte-size can't be smaller than 1 MiB",
  ),
  "shm-growth-byte-size": atLeast(
    "shm-growth-byte-size",
    1,
    "shm-growth-byte-size can't be smaller than or equal to zero.",
  ),
  "stub-timeout-seconds": atLeast(
    "stub-timeout-seconds",
    1,
    "stub-timeout-seconds can't be smaller than or equal to zero.",
  ),
  "thread-pool-size": atLeast("thread-pool-size", 1, "thread-pool-size can't be less than 1."),
  "shm-region-prefix-name": (v) =>
    v === "" ? "shm-region-prefix-name must at least contain one character." : undefined,
  // The backend reads it with an underscore; its README spells it with dashes. Both are taken.
  shm_message_queue_size: atLeast("shm_message_queue_size", Number.MIN_SAFE_INTEGER, ""),
  "shm-message-queue-size": atLeast("shm-message-queue-size", Number.MIN_SAFE_INTEGER, ""),
  "backend-directory": null,
};

/**
 * Split `[<backend>,]<setting>=<value>` as tritonserver does (`ParseBackendConfigOption`): the
 * backend is what precedes the first comma, the setting runs from there to the next `=`; neither
 * setting nor value may be empty. Throws with tritonserver's texts.
 */
export function splitBackendConfig(text: string): [string, string, string] {
  const nameAt = text.indexOf(",");
  if (nameAt === 0) {
    throw new Error(
      `No backend specified. --backend-config option format is <backend name>,<setting>=<value> or <setting>=<value>. Got ${text}`,
    );
  }
  const settingAt = text.indexOf("=", nameAt + 1);
  const format = new Error(`--backend-config option format is '<backend name>,<setting>=<value>'. Got ${text}`);
  if (settingAt < 0) throw format;
  const key = text.slice(nameAt + 1, settingAt);
  const value = text.slice(settingAt + 1);
  if (key === "" || value === "") throw format;
  return [nameAt > 0 ? text.slice(0, nameAt) : "", key, value];
}

/**
 * Read `--backend-config` settings. A setting that is not `[<backend>,]<setting>=<value>`, a
 * Galley setting with a bad value, or a Python backend setting its backend would refuse throws
 * (the message is the usage error's). Any other well-formed setting is accepted, as tritonserver
 * accepts it, with a warning that Galley does not use it.
 */
export function parseBackendConfig(
  settings: readonly string[],
  where: { backendDirectory?: string | undefined } = {},
): BackendConfig {
  const config: BackendConfig = { warnings: [] };
  for (const setting of settings) {
    const [backend, key, value] = splitBackendConfig(setting);
    const unused = (why: string) => config.warnings.push(`--backend-config ${setting}: accepted, ${why}`);
    if (key === "default-max-batch-size" && (backend === "onnxruntime" || backend === "")) {
      if (!/^\d+$/.test(value))
        throw new Error(`--backend-config '${setting}': default-max-batch-size must be a number`);
      config.onnxDefaultMaxBatchSize = Number(value);
    } else if (backend === "js" && key === "default-isolation") {
      if (value !== "thread" && value !== "shared") {
        throw new Error(`--backend-config '${setting}': default-isolation must be thread or shared`);
      }
      config.jsDefaultIsolation = value;
    } else if (backend === "python" && key === "python-executable") {
      if (value === "") throw new Error(`--backend-config '${setting}': python-executable must name a program`);
      config.pythonExecutable = value;
    } else if (backend === "python" && key in PYTHON_SETTINGS) {
      const problem = PYTHON_SETTINGS[key]?.(value);
      if (problem) throw new Error(`--backend-config '${setting}': ${problem}`);
      unused("but Galley's Python backend does not use it (it has no such setting)");
    } else if (backend !== "" && !GALLEY_BACKEND_NAMES.has(backend) && pythonBased(where.backendDirectory, backend)) {
      // Triton too gives a Python-based backend the python backend's settings, not those named for it.
      unused(
        `but not used: '${backend}' is a Python-based backend (${join(where.backendDirectory as string, backend, "model.py")}), which takes the python backend's settings, as in Triton`,
      );
    } else {
      unused(`but Galley does not use it${backend === "" ? "" : ` (the ${backend} backend here has no such setting)`}`);
    }
  }
  return config;
}
