import { MessageChannel, Worker } from "node:worker_threads";
import { type Coalesced, coalescingPost, forEachMessage } from "./coalesce.js";
import type { InstanceTransport, TransportFactory } from "./instance-transport.js";
import type { SharedThreadData, SlotControl, SlotReport } from "./thread-slots.js";

/**
 * How long a shared thread may take to let go of an instance that is being stopped. A thread
 * that does not answer in time is blocked (a model in an endless loop, say) and is stopped with
 * every instance on it.
 */
export const SHARED_DETACH_TIMEOUT_MS = 1000;

/** Options for {@link SharedThreads}. */
export interface SharedThreadsOptions {
  /** The worker's compiled entry (see `workerEntry`); it must call `serveThread`. */
  entry: URL;
  /** Names the threads, as diagnostics show them: `<name>_<index>`. */
  name: string;
  /**
   * How long a thread without instances waits for one before it ends (default
   * {@link SHARED_THREAD_LINGER_MS}): a model's auto-complete and then its instances come one
   * after the other, and starting a thread costs more than keeping one a moment.
   */
  lingerMs?: number;
}

/** How long a shared thread without instances stays, unless {@link SharedThreadsOptions.lingerMs} says otherwise. */
export const SHARED_THREAD_LINGER_MS = 2000;

interface Thread {
  readonly worker: Worker;
  /** The slot whose model code the thread runs synchronously now, 0: none or unknown (see `runAs`). */
  readonly running: Int32Array;
  /** How each attached instance is ended, by slot. */
  readonly slots: Map<number, (reason: string, lostThread?: boolean) => void>;
  /** Detaches waiting for the thread's answer, by slot. */
  readonly detaching: Map<number, (detached: boolean) => void>;
  /** Why the thread is being stopped, for the instances on it; set once it is gone or going. */
  gone?: string;
  /** Ends the thread once it has lingered without instances. */
  linger?: NodeJS.Timeout;
}

/**
 * Worker threads that several model instances share (`isolation: "shared"`): one V8 isolate
 * (~8–11 MiB idle) instead of one per instance. Shared thread `index` carries instance `index`
 * of every model placed on these threads, so a model's instances still run in parallel.
 *
 * Each instance gets a `MessageChannel` of its own, so the host and the worker speak to it as to
 * a thread of its own. What isolation is lost: an uncaught error, `process.exit` or an endless
 * loop in one model ends the thread, and every instance on it fails what it holds and restarts
 * (`model instance 'x' lost its shared thread (crashed: ...)`; one still starting starts again
 * once); heap limits cannot be set per instance. Stopping one instance (an unload, an execute
 * past its timeout) detaches it, leaving its neighbours running; when the thread does not answer
 * within {@link SHARED_DETACH_TIMEOUT_MS} it is stopped, unless it is running a neighbour's code
 * (see `runAs`), and then the instance is let go of alone. A thread ends when its last instance
 * leaves (after lingering).
 */
export class SharedThreads {
  readonly #options: SharedThreadsOptions;
  readonly #threads = new Map<number, Thread>();
  #nextSlot = 1;

  constructor(options: SharedThreadsOptions) {
    this.#options = options;
  }

  /** How many shared threads run now. */
  get running(): number {
    return this.#threads.size;
  }

  /** Starts instances on shared thread `index` (the thread itself starts with its first instance). */
  transport<Out, In>(index: number): TransportFactory<Out, In> {
    return (events) => {
      const thread = this.#threads.get(index) ?? this.#spawn(index);
      clearTimeout(thread.linger);
      thread.worker.ref();
      const slot = this.#nextSlot++;
      const { port1, port2 } = new MessageChannel();
      let ended = false;
      const end = (reason: string, lostThread = false) => {
        if (ended) return;
        ended = true;
        thread.slots.delete(slot);
        port1.close();
        events.ended(reason, lostThread);
        this.#release(index, thread);
      };
      /** End this instance now and have the thread drop it, not waiting for its answer. */
      const abandon = (reason: string) => {
        if (ended) return;
        if (!thread.gone) thread.worker.postMessage({ kind: "detach", slot } satisfies SlotControl);
        end(reason);
      };
      thread.slots.set(slot, end);
      port1.on("message", (message: In | Coalesced<In>) => {
        forEachMessage(message, (one) => {
          if (!ended) events.message(one);
        });
      });
      // A reply that cannot be read would leave its request waiting forever.
      port1.on("messageerror", (error) => abandon(`sent a message the server could not read (${error.message})`));
      const post = coalescingPost<Out>(
        (message, transfer) => port1.postMessage(message, transfer),
        (error) => abandon(`could not be sent a message (${(error as Error).message})`),
      );
      thread.worker.postMessage({ kind: "attach", slot, port: port2 } satisfies SlotControl, [port2]);
      let killing: Promise<void> | undefined;
      const transport: InstanceTransport<Out> = {
        send(message, transfer = []) {
          if (!ended) post(message, transfer);
        },
        kill: () => {
          killing ??= (async () => {
            if (ended) return;
            if (await this.#detach(thread, slot)) end("was stopped");
            else if (ended) return;
            else if (this.#busyElsewhere(thread, slot)) {
              // A neighbour's code holds the thread (a long synchronous execute, say): this
              // instance is let go of without waiting; the thread and its neighbours go on.
              abandon("was stopped");
            } else this.#stop(index, thread, "stopped: an instance on it did not let go in time");
          })();
          return killing;
        },
      };
      return transport;
    };
  }

  #spawn(index: number): Thread {
    const running = new SharedArrayBuffer(4);
    const worker = new Worker(this.#options.entry, {
      name: `${this.#options.name}_${index}`,
      workerData: { shared: true, running } satisfies SharedThreadData,
    });
    const thread: Thread = { worker, running: new Int32Array(running), slots: new Map(), detaching: new Map() };
    this.#threads.set(index, thread);
    worker.on("message", (report: SlotReport) => {
      if (report.kind === "detached") {
        thread.detaching.get(report.slot)?.(true);
        return;
      }
      thread.slots.get(report.slot)?.(`crashed: ${report.reason}`);
    });
    worker.on("error", (error) => this.#gone(index, thread, `crashed: ${error.message}`));
    worker.on("exit", (code) => this.#gone(index, thread, `exited with code ${code}`));
    return thread;
  }

  /** Ask the thread to drop `slot`; false when it did not answer in time or is gone. */
  #detach(thread: Thread, slot: number): Promise<boolean> {
    if (thread.gone) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => settle(false), SHARED_DETACH_TIMEOUT_MS);
      const settle = (detached: boolean) => {
        clearTimeout(timer);
        thread.detaching.delete(slot);
        resolve(detached);
      };
      thread.detaching.set(slot, settle);
      thread.worker.postMessage({ kind: "detach", slot } satisfies SlotControl);
    });
  }

  /** Whether the thread, not answering, is running another instance's code than `slot`'s. */
  #busyElsewhere(thread: Thread, slot: number): boolean {
    const busy = Atomics.load(thread.running, 0);
    return busy !== 0 && busy !== slot;
  }

  /** Stop the thread: every instance on it ends with `reason`. */
  #stop(index: number, thread: Thread, reason: string): void {
    this.#gone(index, thread, reason);
    void thread.worker.terminate();
  }

  /** The thread is gone or going: its instances end (the first reason given is theirs). */
  #gone(index: number, thread: Thread, reason: string): void {
    if (thread.gone) return;
    thread.gone = reason;
    clearTimeout(thread.linger);
    if (this.#threads.get(index) === thread) this.#threads.delete(index);
    for (const settle of thread.detaching.values()) settle(false);
    for (const end of [...thread.slots.values()]) end(`lost its shared thread (${reason})`, true);
  }

  /** A thread without instances ends after lingering (it started with the first one to come). */
  #release(index: number, thread: Thread): void {
    if (thread.slots.size > 0 || thread.gone) return;
    const stop = () => {
      if (thread.slots.size === 0) this.#stop(index, thread, "has no instances");
    };
    const lingerMs = this.#options.lingerMs ?? SHARED_THREAD_LINGER_MS;
    if (lingerMs <= 0) stop();
    else {
      clearTimeout(thread.linger);
      thread.linger = setTimeout(stop, lingerMs);
      // A lingering thread alone does not keep the process alive.
      thread.linger.unref();
      thread.worker.unref();
    }
  }
}
