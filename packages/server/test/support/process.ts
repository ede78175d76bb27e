// `galley serve` as a child process: start it, wait for lines of its log (on output events, never
// on timers), and make sure none outlives its test.
import { type ChildProcess, spawn } from "node:child_process";
import { connect } from "node:net";
import { CLI } from "./harness.js";

const children = new Set<ChildProcess>();

export interface CliProcess {
  child: ChildProcess;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  /** Resolves with the first match of `pattern` in the output so far or to come. */
  waitFor(pattern: RegExp): Promise<RegExpMatchArray>;
  output(): string;
}

/**
 * `galley serve` arguments for `repo` on loopback and free ports (HTTP, gRPC, metrics), then
 * `extra` (a later flag wins).
 */
export function serveArgs(repo: string, extra: readonly string[] = []): string[] {
  return [
    "serve",
    "--model-repository",
    repo,
    "--http-port=0",
    "--grpc-port=0",
    "--metrics-port=0",
    "--http-address=127.0.0.1",
    "--grpc-address=127.0.0.1",
    ...extra,
  ];
}

/** Run the built CLI (`dist/cli/galley.js`) with `args` (and `env` in place of this process's environment). */
export function spawnCli(args: readonly string[], env?: NodeJS.ProcessEnv): CliProcess {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ["ignore", "pipe", "pipe"], ...(env ? { env } : {}) });
  children.add(child);
  let output = "";
  const listeners = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    output += chunk.toString();
    for (const listener of [...listeners]) listener();
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  const waitFor = (pattern: RegExp) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const match = output.match(pattern);
        if (!match) return;
        listeners.delete(check);
        resolve(match);
      };
      listeners.add(check);
      check();
      exited.then(() => {
        if (listeners.delete(check)) reject(new Error(`exited before printing ${pattern}; output:\n${output}`));
      });
    });
  return { child, exited, waitFor, output: () => output };
}

/** Kill every child still running (after a failed test). */
export function killChildren(): void {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
  children.clear();
}

/** Resolves with the connection error's code (e.g. ECONNREFUSED), or "connected". */
export function tryConnect(port: number, host = "127.0.0.1"): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, host);
    socket.once("connect", () => {
      socket.destroy();
      resolve("connected");
    });
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
}
