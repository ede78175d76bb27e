// Process orchestration: the benchmark scripts fork servers and the load generator as separate
// Node processes (tsx-loaded) and talk to them over the IPC channel, one job at a time.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

type Reply = { id: number; result?: unknown; error?: string };
type FromChild = { ready: unknown } | Reply;
type ToChild = { id: number; job: unknown } | { stop: true };

/** A forked child process that answers jobs. */
export interface Child<Ready> {
  /** What the child reported once it was ready (for servers: its ports). */
  ready: Ready;
  call<T>(job: unknown): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Fork `entry` (a .ts file next to the caller) with tsx, `env` added to this process's
 * environment, and wait for it to report ready.
 */
export function startChild<Ready>(
  entry: URL,
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<Child<Ready>> {
  const child = fork(fileURLToPath(entry), args, {
    cwd: ROOT,
    execArgv: ["--import", "tsx"],
    stdio: "inherit",
    env: { ...process.env, ...env },
  });
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let next = 0;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => {
      const error = new Error(`${entry.pathname} exited with code ${code}`);
      reject(error);
      for (const w of waiting.values()) w.reject(error);
    });
    child.on("message", (message: FromChild) => {
      if ("ready" in message) {
        resolve({
          ready: message.ready as Ready,
          call: <T>(job: unknown) =>
            new Promise<T>((res, rej) => {
              const id = next++;
              waiting.set(id, { resolve: res as (v: unknown) => void, reject: rej });
              child.send({ id, job } satisfies ToChild);
            }),
          stop: async () => {
            if (child.exitCode === null) child.send({ stop: true } satisfies ToChild);
            await exited;
          },
        });
        return;
      }
      const w = waiting.get(message.id);
      waiting.delete(message.id);
      if (message.error !== undefined) w?.reject(new Error(message.error));
      else w?.resolve(message.result);
    });
  });
}

/** In a child: report ready, answer jobs with `handle`, and run `shutdown` when told to stop. */
export function serveJobs(ready: unknown, handle: (job: never) => Promise<unknown>, shutdown: () => Promise<void>) {
  const send = (message: FromChild) => process.send?.(message);
  process.on("message", async (message: ToChild) => {
    if ("stop" in message) {
      await shutdown();
      process.exit(0);
    }
    try {
      send({ id: message.id, result: await handle(message.job as never) });
    } catch (error) {
      send({ id: message.id, error: (error as Error).stack ?? String(error) });
    }
  });
  // The parent went away without stopping us: do not linger.
  process.on("disconnect", () => void shutdown().finally(() => process.exit(0)));
  send({ ready });
}
