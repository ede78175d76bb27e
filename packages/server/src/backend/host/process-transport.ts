import { type ChildProcess, spawn } from "node:child_process";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Logger } from "../../base/log.js";
import type { InstanceTransport, TransportEvents, TransportFactory } from "./instance-transport.js";

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

/** Options for {@link sharedProcess}. */
export interface SharedProcessOptions extends ProcessTransportOptions {
  /**
   * How many instances one process runs: a socket each, on fd 3, 4, ...; the child reads the
   * count from `GALLEY_STUB_CHANNELS` (set only when above 1).
   */
  channels: number;
}

/**
 * One child process that runs several instances (the Python backend's `SHARED_STUB_PROCESS`),
 * each on its own socket, seen by its host as a transport of its own: see {@link sharedProcess}.
 */
export interface SharedProcess<Out, In> {
  /**
   * The transports of the instance on socket `channel` (0-based). `revive` is called when a new
   * process starts for another instance: an instance waiting to restart joins it at once.
   */
  transport(channel: number, revive?: () => void): TransportFactory<Out, In>;
  /** End every process still running (once their instances have closed). */
  close(): Promise<void>;
}

/** Host messages that put an instance in its model's code, and those that take it out. */
const ENTERS = new Set(["start", "execute", "stop"]);
const LEAVES = new Set(["started", "start-failed", "executed", "stopped"]);

/**
 * Instances in child processes (Triton's Python backend stub): each start spawns a fresh process
 * in its own process group with a private socket on fd 3. Messages are frames of a 4-byte
 * little-endian length and a UTF-8 JSON body, both ways; tensor bytes do not travel here (they go
 * through shared memory). The child's stdout and stderr lines go to the log. `kill()` sends
 * SIGTERM to the group, then SIGKILL after a grace. The end is reported once: an exit (`exited
 * with code N` / `was killed by SIGNAL`), a failure to spawn, or a frame that cannot be read.
 */
export function processTransport<Out, In>(options: ProcessTransportOptions): TransportFactory<Out, In> {
  return sharedProcess<Out, In>({ ...options, channels: 1 }).transport(0);
}

/** One spawned process and the instances on its sockets. */
interface Run {
  child: ChildProcess;
  sockets: Socket[];
  /** Per socket: taken by an instance (each is taken once), and whether that instance is still there. */
  taken: boolean[];
  live: boolean[];
  /** Exited, failed to spawn, or being ended: no instance joins it any more. */
  dying: boolean;
  exited: Promise<void>;
  /** Reports each live instance's end, once, with `reason`. */
  ends: ((reason: string) => void)[];
  terminating?: Promise<void>;
}

/**
 * {@link processTransport} for `channels` instances in one process. The first instance that starts
 * spawns it with a socket for each; the others take theirs as they start. An instance that starts
 * again (a restart) takes its socket in the running process if it has not used it yet, else a new
 * process is spawned (and the instances waiting to restart are revived into it). Whatever ends the
 * process ends every instance in it. `kill()` of an instance that is in its model's code (start,
 * execute, stop not answered: it cannot be stopped alone) or the last one in the process ends the
 * process, as {@link processTransport} does; otherwise only its socket closes (its thread in the
 * process ends) and its end is reported at once.
 */
export function sharedProcess<Out, In>(options: SharedProcessOptions): SharedProcess<Out, In> {
  installExitHook();
  const channels = Math.max(1, Math.floor(options.channels));
  const revivers = new Map<number, () => void>();
  const runs = new Set<Run>();
  let current: Run | undefined;

  const terminate = (run: Run): Promise<void> => {
    run.dying = true;
    if (current === run) current = undefined;
    const { child } = run;
    run.terminating ??= (async () => {
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
        for (const socket of run.sockets) socket.end();
        killGroup(child, "SIGTERM");
        const timer = setTimeout(() => killGroup(child, "SIGKILL"), options.killGraceMs ?? 2000);
        await run.exited;
        clearTimeout(timer);
      }
      // A group member that outlived the leader goes too.
      killGroup(child, "SIGKILL");
    })();
    return run.terminating;
  };

  /** Whether an instance other than `channel`'s is in the process, or may still join it. */
  const othersIn = (run: Run, channel: number) =>
    run.live.some((live, i) => i !== channel && (live || (!run.taken[i] && run === current)));

  const spawnRun = (): Run => {
    const child = spawn(options.command, [...options.args], {
      stdio: ["ignore", "pipe", "pipe", ...Array.from({ length: channels }, () => "pipe" as const)],
      env: {
        ...(options.env ?? process.env),
        ...(channels > 1 ? { GALLEY_STUB_CHANNELS: String(channels) } : {}),
      },
      ...(options.cwd ? { cwd: options.cwd } : {}),
      detached: true,
    });
    live.add(child);
    const sockets = Array.from({ length: channels }, (_, i) => child.stdio[3 + i] as Socket);
    for (const socket of sockets) socket.on("error", () => undefined);
    pipeLines(child.stdout, (line) => options.log.info(`${options.name}: ${line}`));
    pipeLines(child.stderr, (line) => options.log.warn(`${options.name}: ${line}`));
    const run: Run = {
      child,
      sockets,
      taken: sockets.map(() => false),
      live: sockets.map(() => false),
      dying: false,
      exited: Promise.resolve(),
      ends: sockets.map(() => () => undefined),
    };
    const endAll = (reason: string) => {
      run.dying = true;
      if (current === run) current = undefined;
      runs.delete(run);
      for (const end of run.ends) end(reason);
    };
    run.exited = new Promise<void>((resolve) => {
      // "exit", not "close": a process the model forked may hold the pipes open after the stub
      // is gone; it is in the stub's group, which goes with it.
      child.once("exit", (code, signal) => {
        live.delete(child);
        killGroup(child, "SIGKILL");
        for (const socket of sockets) socket.destroy();
        endAll(signal ? `was killed by ${signal}` : `exited with code ${code}`);
        resolve();
      });
    });
    child.once("error", (error) => {
      live.delete(child);
      endAll(`could not be started: ${error.message}`);
    });
    runs.add(run);
    return run;
  };

  const attach = (channel: number, events: TransportEvents<In>): InstanceTransport<Out> => {
    let run = current;
    if (!run || run.dying || run.taken[channel]) {
      if (run && !run.dying) {
        // Superseded: sockets no instance took close; with no instance left, it ends.
        for (const [i, socket] of run.sockets.entries()) if (!run.taken[i]) socket.end();
        if (!run.live.some(Boolean)) void terminate(run);
      }
      run = current = spawnRun();
      for (const [other, revive] of revivers) if (other !== channel) queueMicrotask(revive);
    }
    return take(run, channel, events);
  };

  const take = (run: Run, channel: number, events: TransportEvents<In>): InstanceTransport<Out> => {
    const socket = run.sockets[channel] as Socket;
    run.taken[channel] = true;
    run.live[channel] = true;
    let ended = false;
    /** Start, execute and stop sent and not yet answered: the instance is in its model's code. */
    let inModel = 0;
    const end = (reason: string) => {
      if (ended) return;
      ended = true;
      run.live[channel] = false;
      events.ended(reason);
    };
    run.ends[channel] = end;
    const fail = (reason: string) => {
      end(reason);
      run.dying = true;
      if (current === run) current = undefined;
      killGroup(run.child, "SIGKILL");
    };
    const reader = frameReader((body) => {
      if (ended) return;
      let message: In;
      try {
        message = JSON.parse(body.toString("utf8")) as In;
      } catch (error) {
        fail(`sent a message the server could not read (${(error as Error).message})`);
        return;
      }
      // Counted before the host hears it: its answer may be to kill the instance.
      if (LEAVES.has((message as { kind?: string }).kind ?? "")) inModel = Math.max(0, inModel - 1);
      events.message(message);
    });
    socket.on("data", (chunk: Buffer) => {
      const problem = reader(chunk);
      if (problem) fail(`sent a message the server could not read (${problem})`);
    });
    let killing: Promise<void> | undefined;
    return {
      send(message) {
        if (ended || socket.destroyed) return;
        if (ENTERS.has((message as { kind?: string }).kind ?? "")) inModel++;
        socket.write(encodeFrame(message));
      },
      kill() {
        killing ??= (async () => {
          if (!ended && !run.dying && inModel === 0 && othersIn(run, channel)) {
            // This instance alone: its socket closes, and its thread in the process ends.
            run.live[channel] = false;
            socket.end();
            queueMicrotask(() => end("was stopped"));
            return;
          }
          await terminate(run);
        })();
        return killing;
      },
    };
  };

  return {
    transport(channel, revive) {
      if (!Number.isInteger(channel) || channel < 0 || channel >= channels) {
        throw new RangeError(`channel ${channel} of a process with ${channels}`);
      }
      if (revive) revivers.set(channel, revive);
      return (events) => attach(channel, events);
    },
    async close() {
      revivers.clear();
      await Promise.all([...runs].map(terminate));
    },
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
