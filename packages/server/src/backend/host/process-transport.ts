import { type ChildProcess, spawn } from "node:child_process";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Logger } from "../../base/log.js";
import type { InstanceTransport, TransportFactory } from "./instance-transport.js";

/** Options for {@link processTransport}. */
export interface ProcessTransportOptions {
  /** The program (`python3`, or an environment's `bin/python3`). */
  command: string;
  args: readonly string[];
  /** The child's environment (default: the server's). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** The instance's name, prefixed to every line the child prints. */
  name: string;
  /** Where the child's stdout (info) and stderr (warn) lines go. */
  log: Logger;
  /** How long `kill()` waits after SIGTERM before SIGKILL (default 2000 ms). */
  killGraceMs?: number;
}

/** The largest control frame either side accepts (tensor bytes never travel in frames). */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;

/** Every child still running, killed at once if the server exits without closing them. */
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    // The child leads its own process group: whatever it started goes with it.
    process.kill(-child.pid, signal);
  } catch {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Synchronous, so it runs even on process.exit(); the children also exit when their pipe
  // closes, and ask the kernel to kill them when the server dies (see the Python stub).
  process.on("exit", () => {
    for (const child of live) killGroup(child, "SIGKILL");
  });
}

/**
 * Instances in child processes (Triton's Python backend stub): each start spawns a fresh process
 * in its own process group with a private socket on fd 3. Messages are frames of a 4-byte
 * little-endian length and a UTF-8 JSON body, both ways; tensor bytes do not travel here (they go
 * through shared memory). The child's stdout and stderr lines go to the log. `kill()` sends
 * SIGTERM to the group, then SIGKILL after a grace. The end is reported once: an exit (`exited
 * with code N` / `was killed by SIGNAL`), a failure to spawn, or a frame that cannot be read.
 */
export function processTransport<Out, In>(options: ProcessTransportOptions): TransportFactory<Out, In> {
  installExitHook();
  return (events) => {
    let ended = false;
    const end = (reason: string) => {
      if (ended) return;
      ended = true;
      events.ended(reason);
    };
    const child = spawn(options.command, [...options.args], {
      stdio: ["ignore", "pipe", "pipe", "pipe"],
      env: options.env ?? process.env,
      ...(options.cwd ? { cwd: options.cwd } : {}),
      detached: true,
    });
    live.add(child);
    const channel = child.stdio[3] as Socket;
    pipeLines(child.stdout, (line) => options.log.info(`${options.name}: ${line}`));
    pipeLines(child.stderr, (line) => options.log.warn(`${options.name}: ${line}`));
    const exited = new Promise<void>((resolve) => {
      // "exit", not "close": a process the model forked may hold the pipes open after the stub
      // is gone; it is in the stub's group, which goes with it.
      child.once("exit", (code, signal) => {
        live.delete(child);
        killGroup(child, "SIGKILL");
        channel.destroy();
        end(signal ? `was killed by ${signal}` : `exited with code ${code}`);
        resolve();
      });
    });
    child.once("error", (error) => {
      live.delete(child);
      end(`could not be started: ${error.message}`);
    });
    channel.on("error", () => undefined);
    const reader = frameReader((body) => {
      if (ended) return;
      let message: In;
      try {
        message = JSON.parse(body.toString("utf8")) as In;
      } catch (error) {
        fail(`sent a message the server could not read (${(error as Error).message})`);
        return;
      }
      events.message(message);
    });
    const fail = (reason: string) => {
      end(reason);
      killGroup(child, "SIGKILL");
    };
    channel.on("data", (chunk: Buffer) => {
      const problem = reader(chunk);
      if (problem) fail(`sent a message the server could not read (${problem})`);
    });
    let killing: Promise<void> | undefined;
    const transport: InstanceTransport<Out> = {
      send(message) {
        if (ended || channel.destroyed) return;
        channel.write(encodeFrame(message));
      },
      kill() {
        killing ??= (async () => {
          if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
            channel.end();
            killGroup(child, "SIGTERM");
            const timer = setTimeout(() => killGroup(child, "SIGKILL"), options.killGraceMs ?? 2000);
            await exited;
            clearTimeout(timer);
          }
          // A group member that outlived the leader goes too.
          killGroup(child, "SIGKILL");
        })();
        return killing;
      },
    };
    return transport;
  };
}

/** One frame: the JSON body's length (u32 LE), then the body. */
export function encodeFrame(message: unknown): Buffer {
  let text: string;
  try {
    text = JSON.stringify(message);
  } catch {
    // A BigInt somewhere (a parameter): written as its decimal string. Rare, so the common
    // case pays for no replacer.
    text = JSON.stringify(message, jsonBigInt);
  }
  const length = Buffer.byteLength(text, "utf8");
  const frame = Buffer.allocUnsafe(4 + length);
  frame.writeUInt32LE(length, 0);
  frame.write(text, 4, length, "utf8");
  return frame;
}

function jsonBigInt(_key: string, value: unknown): unknown {
  return typeof value === "bigint" ? value.toString() : value;
}

/**
 * Splits a byte stream into frames and hands each body to `onFrame`; returns, per chunk, why the
 * stream cannot be read (a frame over {@link MAX_FRAME_BYTES}) or undefined.
 */
export function frameReader(onFrame: (body: Buffer) => void): (chunk: Buffer) => string | undefined {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  return (chunk) => {
    pending.push(chunk);
    pendingBytes += chunk.byteLength;
    if (pendingBytes < 4) return undefined;
    let data = pending.length === 1 ? (pending[0] as Buffer) : Buffer.concat(pending, pendingBytes);
    let at = 0;
    while (data.byteLength - at >= 4) {
      const length = data.readUInt32LE(at);
      if (length > MAX_FRAME_BYTES) return `a frame of ${length} bytes`;
      if (data.byteLength - at - 4 < length) break;
      onFrame(data.subarray(at + 4, at + 4 + length));
      at += 4 + length;
    }
    data = data.subarray(at);
    pending = data.byteLength > 0 ? [data] : [];
    pendingBytes = data.byteLength;
    return undefined;
  };
}

function pipeLines(stream: Readable | null, onLine: (line: string) => void): void {
  if (!stream) return;
  let rest = "";
  stream.setEncoding("utf8");
  stream.on("data", (text: string) => {
    const lines = (rest + text).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) if (line.trim() !== "") onLine(line.trimEnd());
  });
  stream.on("end", () => {
    if (rest.trim() !== "") onLine(rest.trimEnd());
    rest = "";
  });
}
