import { Worker } from "node:worker_threads";
import { type Coalesced, coalescingPost, forEachMessage } from "./coalesce.js";
import type { InstanceTransport, TransportFactory } from "./instance-transport.js";

/** Options for {@link workerTransport}. */
export interface WorkerTransportOptions {
  /** The worker's compiled entry (see `workerEntry`). */
  entry: URL;
  /** The thread's name, as diagnostics show it. */
  name: string;
  /** `memory_limit_mb`: the thread's V8 heap limit in MiB; none when absent. */
  memoryLimitMb?: number;
}

/**
 * Instances in worker threads: each start creates a fresh thread. Messages go through the
 * thread's port, those sent in one run of callbacks and microtasks in one `postMessage` (see
 * `coalescingPost`); buffers in a transfer list move, and a list that cannot move (a buffer Node
 * pools, one already moved) is retried as a copy. The thread's end is reported once: an uncaught
 * error (`crashed: ...`, or `ran out of memory` past its heap limit), an exit (`exited with code
 * N`), or a message from it that cannot be read.
 */
export function workerTransport<Out, In>(options: WorkerTransportOptions): TransportFactory<Out, In> {
  const limit = options.memoryLimitMb;
  return (events) => {
    const worker = new Worker(options.entry, {
      name: options.name,
      ...(limit
        ? { resourceLimits: { maxOldGenerationSizeMb: limit, maxYoungGenerationSizeMb: Math.max(4, limit / 8) } }
        : {}),
    });
    let ended = false;
    const end = (reason: string) => {
      if (ended) return;
      ended = true;
      events.ended(reason);
    };
    worker.on("message", (message: In | Coalesced<In>) => {
      forEachMessage(message, (one) => {
        if (!ended) events.message(one);
      });
    });
    worker.on("error", (error) => end(describeCrash(error, limit)));
    // A reply that cannot be read would leave its request waiting forever: treat it as a crash.
    worker.on("messageerror", (error) => {
      end(`sent a message the server could not read (${error.message})`);
      void worker.terminate();
    });
    worker.on("exit", (code) => end(`exited with code ${code}`));
    const post = coalescingPost<Out>(
      (message, transfer) => worker.postMessage(message, transfer),
      (error) => {
        // A message that cannot be cloned would leave its request waiting forever.
        end(`could not be sent a message (${(error as Error).message})`);
        void worker.terminate();
      },
    );
    const transport: InstanceTransport<Out> = {
      send: (message, transfer = []) => post(message, transfer),
      async kill() {
        await worker.terminate();
      },
    };
    return transport;
  };
}

function describeCrash(error: Error, limitMb: number | undefined): string {
  if ((error as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY") {
    return `ran out of memory${limitMb ? ` (memory_limit_mb ${limitMb})` : ""}`;
  }
  return `crashed: ${error.message}`;
}
