// A Galley server for the Python-backend GPU checks, in a child process (CUDA IPC handles do not
// open in the process that made them, so the client's side stays in the check's own process): the
// check forks its own script with `--serve <repository> <python> [explicit]`, and that process runs
// `serveChecks`.
import { fork } from "node:child_process";
import { writeFileSync } from "node:fs";

/**
 * Fork this script as the server of `repository` (Python stubs run by `python`; `explicit`: model
 * control mode explicit; `metrics`: a metrics port too). Resolves once it listens: `ports` ({ grpc,
 * metrics, failed }), `pid`, `logs` (its output so far), `metricsText()` (its /metrics),
 * `transfers()` (its host-transfer counters) and `stop(logFile)` (ends it, writes its log).
 */
export async function forkServer(repository, python, { env = process.env, explicit = false, metrics = false } = {}) {
  const modes = [...(explicit ? ["explicit"] : []), ...(metrics ? ["metrics"] : [])];
  const child = fork(process.argv[1], ["--serve", repository, python, modes.join(",")], {
    stdio: ["ignore", "pipe", "pipe", "ipc"],
    env,
  });
  const logs = [];
  child.stdout.on("data", (d) => logs.push(d));
  child.stderr.on("data", (d) => logs.push(d));
  const ports = await new Promise((resolve, reject) => {
    child.once("message", resolve);
    child.once("exit", (code) => reject(new Error(`the server exited with ${code}: ${Buffer.concat(logs)}`)));
  });
  return {
    child,
    ports,
    pid: child.pid,
    logs,
    metricsText: async () => (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text(),
    transfers: () =>
      new Promise((resolve) => {
        child.once("message", resolve);
        child.send("transfers");
      }),
    async stop(logFile) {
      child.disconnect();
      await new Promise((resolve) => child.once("exit", resolve));
      writeFileSync(logFile, Buffer.concat(logs));
    },
  };
}

/** The child's side of {@link forkServer}: `argv` is what follows `--serve`. */
export async function serveChecks([repository, python = "python3", modes = ""]) {
  const { createServer, createLogger, hostTransfers } = await import("@galley/server");
  const mode = modes.split(",");
  const server = createServer({
    modelRepositories: [repository],
    pythonExecutable: python,
    ...(mode.includes("explicit") ? { controlMode: "explicit" } : {}),
    allowClientShm: true,
    http: false,
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: mode.includes("metrics") ? { host: "127.0.0.1", port: 0 } : false,
    log: createLogger({ verboseLevel: 1 }),
    // A check that lays the server's trace timestamps beside its own (tracing off until it asks).
    ...(process.env.GALLEY_CHECK_TRACE_FILE ? { trace: { file: process.env.GALLEY_CHECK_TRACE_FILE, level: 0 } } : {}),
  });
  const addresses = await server.listen();
  process.on("message", (m) => {
    if (m === "transfers") process.send?.(hostTransfers.snapshot());
  });
  process.send?.({ grpc: addresses.grpc?.port, metrics: addresses.metrics?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
}

/** What `model` moved between two `transfers()` snapshots (bytes host→device, device→host, on the device). */
export function transferDelta(before, after, model) {
  const zero = { hostToDevice: 0, deviceToHost: 0, onDevice: 0 };
  const a = after.models[model] ?? zero;
  const b = before.models[model] ?? zero;
  return {
    hostToDevice: a.hostToDevice - b.hostToDevice,
    deviceToHost: a.deviceToHost - b.deviceToHost,
    onDevice: a.onDevice - b.onDevice,
  };
}
