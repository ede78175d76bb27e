import { type MessagePort, receiveMessageOnPort } from "node:worker_threads";
import { now } from "../../base/clock.js";

/**
 * A worker thread's wait for its next message, hot for a while after a batch: instead of going
 * back to its event loop (where a message wakes it through the kernel: tens of µs on a VM, more
 * when its core has gone idle), the thread polls its port with `receiveMessageOnPort` for up to a
 * window, then sleeps as usual. The caller asks for it batch by batch ({@link HotWait.after}); a
 * wait is made only when the gap before the batch it follows was within the window too, so a
 * client that calls now and then costs no spinning, only one whose calls follow each other does.
 * While it polls, the thread's event loop does not run: only for workers whose messages all come
 * through this port and whose handlers are synchronous.
 */
export class HotWait {
  readonly #port: MessagePort;
  readonly #handle: (message: unknown) => void;
  /** When the last answer left (ns), for the gap before the next message. */
  #answeredAt: bigint | undefined;
  /** The gap before the batch being handled (ns). */
  #gap: bigint | undefined;
  #windowNs = 0n;
  #caught = false;

  /** `handle` is the worker's own handler, given each message taken while waiting hot. */
  constructor(port: MessagePort, handle: (message: unknown) => void) {
    this.#port = port;
    this.#handle = handle;
  }

  /** A batch arrived: true when it was taken while waiting hot. */
  arrived(): boolean {
    this.#gap = this.#answeredAt === undefined ? undefined : now() - this.#answeredAt;
    const caught = this.#caught;
    this.#caught = false;
    return caught;
  }

  /**
   * Its answer has left: wait hot for up to `windowUs` µs once the current handler returns (see
   * {@link HotWait.drain}), when the gap before this batch was within that window too.
   */
  after(windowUs: number): void {
    this.#answeredAt = now();
    const window = BigInt(Math.max(0, Math.floor(windowUs))) * 1000n;
    this.#windowNs = window > 0n && (this.#gap === undefined || this.#gap <= window) ? window : 0n;
  }

  /** No more hot waits until the next batch asks (a stop). */
  cancel(): void {
    this.#windowNs = 0n;
  }

  /**
   * Make the wait asked for, handing each message taken to the handler (which may ask for
   * another); returns when a window passes without a message. Call at the end of the port's
   * message listener.
   */
  drain(): void {
    while (this.#windowNs > 0n) {
      const until = now() + this.#windowNs;
      this.#windowNs = 0n;
      let taken = receiveMessageOnPort(this.#port);
      while (taken === undefined && now() < until) taken = receiveMessageOnPort(this.#port);
      if (taken === undefined) return;
      // Only what the handler reads while handling this message counts as caught.
      this.#caught = true;
      try {
        this.#handle(taken.message);
      } finally {
        this.#caught = false;
      }
    }
  }
}
