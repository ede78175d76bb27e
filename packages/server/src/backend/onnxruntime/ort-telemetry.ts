// ONNX Runtime's telemetry. The prebuilt onnxruntime-node library (1.2x on Linux) starts a
// telemetry client the first time a process creates its ONNX Runtime environment: it writes
// `.ses` and `mat-debug-<pid>.log` into the temp folder (never removed), a device id and an offline
// event store under `$XDG_CACHE_HOME` or `~/.cache/Microsoft/DeveloperTools/.onnxruntime/`, and
// carries a vendor collector URL. The library reads `ORT_DISABLE_TELEMETRY` (`1`, `true` or `yes`
// turn it off) once, from the process's environment, when that environment is created, whichever
// thread creates it. Galley turns it off unless the user said otherwise.

/** The variable onnxruntime reads. */
export const ORT_TELEMETRY_VARIABLE = "ORT_DISABLE_TELEMETRY";

/**
 * Turn ONNX Runtime's telemetry off for this process unless `ORT_DISABLE_TELEMETRY` is set to a
 * value already (`ORT_DISABLE_TELEMETRY=0` opts in). Call it on the main thread before anything
 * loads onnxruntime-node: a worker thread's `process.env` is a copy that native code does not
 * read, but worker threads and child processes started later see what the main thread set.
 * Returns true when telemetry stays on (the user opted in).
 */
export function keepOrtTelemetryOff(env: NodeJS.ProcessEnv = process.env): boolean {
  const value = env[ORT_TELEMETRY_VARIABLE];
  if (value === undefined || value === "") {
    env[ORT_TELEMETRY_VARIABLE] = "1";
    return false;
  }
  return !/^(1|true|yes)$/i.test(value);
}
