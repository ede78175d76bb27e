import { readFileSync } from "node:fs";
import { type AddressInfo, type Server, Socket } from "node:net";

/** One bound listener. */
export interface Listener {
  readonly address: AddressInfo;
  /** Stop accepting, let in-flight requests finish for up to `graceMs`, then cut what is left. */
  close(graceMs: number): Promise<void>;
}

/** Listen on `host:port`; rejects with the bind error (port taken, address not available). */
export function bind(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/** Descriptors kept out of the ports' share: model files, stub processes and their pipes, shared memory. */
const RESERVED_DESCRIPTORS = 256;

/**
 * The default of `--http-max-connections` and `--grpc-max-connections`: each port may hold half
 * of the descriptors the process may open (its soft `RLIMIT_NOFILE`) less 256, so that neither
 * port alone can take every descriptor from the other and from the models (at 1,024 descriptors:
 * 384 a port). 10,000 where the limit cannot be read.
 */
export function defaultMaxConnections(): number {
  let limit: number | undefined;
  try {
    const soft = /^Max open files\s+(\S+)/m.exec(readFileSync("/proc/self/limits", "utf8"))?.[1];
    limit = soft === undefined || soft === "unlimited" ? undefined : Number(soft);
  } catch {
    limit = undefined;
  }
  if (limit === undefined || !Number.isFinite(limit)) return 10_000;
  return Math.max(32, Math.floor((limit - RESERVED_DESCRIPTORS) / 2));
}

/**
 * Hold `server` to `max` open connections (0: no limit): a connection past it is handed to
 * `refuse`, which answers and closes it, and not to the server's own `connection` listeners. Call
 * once those listeners are in place. Streams that are not sockets (a request rewritten by
 * `http1-client-errors.ts` on a connection already counted) pass uncounted.
 */
export function limitConnections(server: Server, max: number, refuse: (socket: Socket) => void): void {
  if (max <= 0) return;
  const serve = server.listeners("connection") as ((socket: unknown) => void)[];
  server.removeAllListeners("connection");
  let open = 0;
  server.on("connection", (socket: unknown) => {
    if (socket instanceof Socket) {
      if (open >= max) {
        socket.on("error", ignore);
        refuse(socket);
        return;
      }
      open++;
      socket.once("close", () => open--);
    }
    for (const listener of serve) listener.call(server, socket);
  });
}

/**
 * Write `answer` and close `socket`, reading (and dropping) what the client still sends for up to
 * a second so that the close does not reset the connection before the client reads the answer.
 */
export function answerAndClose(socket: Socket, answer: string | Uint8Array): void {
  socket.on("data", ignore);
  socket.setTimeout(1000, () => socket.destroy());
  socket.end(answer);
}

function ignore(): void {}

/** The message of a connection refused for the port's limit. */
export function tooManyConnections(max: number): string {
  return `too many connections to this port (the limit is ${max})`;
}
