// The worker side of a thread that runs model instances: one instance on the thread's own port
// (a thread of its own), or several, each on a port of its own that the main thread attaches
// and detaches (a shared thread; see `SharedThreads`).
import { type MessagePort, parentPort, workerData } from "node:worker_threads";

/** From the main thread to a shared thread, on the thread's own port. */
export type SlotControl =
  /** Serve a new instance on `port`. */
  | { kind: "attach"; slot: number; port: MessagePort }
  /** Let go of the instance (its port is closed; what its model still runs is abandoned). */
  | { kind: "detach"; slot: number };

/** From a shared thread to the main thread, on the thread's own port. */
export type SlotReport =
  | { kind: "detached"; slot: number }
  /** The instance cannot go on (a message it could not read or send): its port is closed. */
  | { kind: "slot-failed"; slot: number; reason: string };

/** What a thread started by `SharedThreads` is given as `workerData`. */
export interface SharedThreadData {
  shared: true;
  /**
   * One Int32: the slot whose model code the thread is running synchronously now, 0 when none
   * (or when only a promise continuation or a timer of some model runs). The main thread reads it
   * when the thread does not answer, to tell a neighbour that is busy from the instance it stops.
   */
  running: SharedArrayBuffer;
}

let running: Int32Array | undefined;

/**
 * Run `fn`, model code of instance `slot`, marked as such for the main thread (see
 * {@link SharedThreadData.running}); outside a shared thread it only runs `fn`.
 */
export function runAs<T>(slot: number | undefined, fn: () => T): T {
  if (!running || slot === undefined) return fn();
  const previous = Atomics.exchange(running, 0, slot);
  try {
    return fn();
  } finally {
    Atomics.store(running, 0, previous);
  }
}

/**
 * Serve one instance on `port`. `fail` ends the instance for good: in a thread of its own it
 * throws (the thread dies and the host restarts it); in a shared thread it closes the instance's
 * port and tells the main thread, leaving its neighbours running. `slot` is set in a shared
 * thread, where it makes each instance's imports its own. Returns what to do when the main
 * thread lets go of the instance (a detach): end what it still has in progress.
 */
export type ServeInstance = (port: MessagePort, fail: (error: Error) => void, slot: number | undefined) => () => void;

/** Run this thread: one instance, or as many as the main thread attaches when it started the thread shared. */
export function serveThread(serve: ServeInstance): void {
  const port = parentPort;
  if (!port) throw new Error("a model instance must run in a worker thread");
  const data = workerData as Partial<SharedThreadData> | null;
  if (data?.shared !== true) {
    serve(
      port,
      (error) => {
        throw error;
      },
      undefined,
    );
    return;
  }
  if (data.running) running = new Int32Array(data.running);
  const slots = new Map<number, { port: MessagePort; dispose: () => void }>();
  const report = (message: SlotReport) => port.postMessage(message);
  port.on("message", (message: SlotControl) => {
    const { slot } = message;
    if (message.kind === "detach") {
      const attached = slots.get(slot);
      slots.delete(slot);
      attached?.port.close();
      try {
        attached?.dispose();
      } finally {
        report({ kind: "detached", slot });
      }
      return;
    }
    const attached: { port: MessagePort; dispose: () => void } = { port: message.port, dispose: () => {} };
    slots.set(slot, attached);
    attached.dispose = serve(
      message.port,
      (error) => {
        if (!slots.delete(slot)) return;
        message.port.close();
        attached.dispose();
        report({ kind: "slot-failed", slot, reason: error.message });
      },
      slot,
    );
  });
}
