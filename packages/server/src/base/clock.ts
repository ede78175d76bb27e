import { Worker } from "node:worker_threads";
import { workerEntry } from "./worker-entry.js";

/** Monotonic nanoseconds: every duration the server measures (statistics, queue times, timeouts). */
export const now = (): bigint => process.hrtime.bigint();

/** Time for schedulers: real by default, replaceable so tests control it. */
export interface Clock {
  /** Monotonic nanoseconds. */
  now(): bigint;
  /** Call `callback` once, `delayMs` (fractional: microseconds count) from now. */
  setTimer(callback: () => void, delayMs: number): unknown;
  clearTimer(handle: unknown): void;
  /**
   * Call `callback` once at the end of this event-loop turn, after the I/O callbacks it runs
   * (`setImmediate`): work that arrived in one turn is then looked at together.
   */
  soon(callback: () => void): void;
}

const WORKER_URL = workerEntry("./timer-worker.js", import.meta.url);

interface Timer {
  at: bigint;
  callback: () => void;
}

/**
 * Timers with microsecond resolution. `setTimeout` waits at least 1 ms and then fires on libuv's
 * millisecond clock, so a 500 µs `max_queue_delay_microseconds` used to hold a lone request for
 * 1–2 ms. One thread per process (started with the first timer, never keeping the process alive)
 * sleeps in `Atomics.wait` until the earliest deadline and then posts a message: no polling, one
 * wake-up per expiry, and arming costs a shared-memory store (plus a notify when the earliest
 * deadline moves earlier). Until that thread is running, a `setTimeout` stands in.
 */
class PreciseTimers {
  readonly #timers = new Set<Timer>();
  readonly #deadline = new BigInt64Array(new SharedArrayBuffer(8));
  readonly #wake = new Int32Array(new SharedArrayBuffer(4));
  #worker?: Worker;
  #online = false;
  #broken = false;
  #fallback?: NodeJS.Timeout;

  set(callback: () => void, delayMs: number): Timer {
    const timer = { at: process.hrtime.bigint() + BigInt(Math.max(0, Math.round(delayMs * 1e6))), callback };
    this.#timers.add(timer);
    this.#arm();
    return timer;
  }

  clear(timer: Timer): void {
    // The thread may still wake for it; the tick then finds nothing due and re-arms.
    this.#timers.delete(timer);
  }

  #tick(): void {
    if (this.#fallback) clearTimeout(this.#fallback);
    this.#fallback = undefined;
    const now = process.hrtime.bigint();
    const due = [...this.#timers].filter((t) => t.at <= now).sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
    for (const timer of due) {
      // An earlier callback may have cleared it.
      if (this.#timers.delete(timer)) timer.callback();
    }
    this.#arm();
  }

  /** Point the thread at the earliest deadline. */
  #arm(): void {
    let next: bigint | undefined;
    for (const { at } of this.#timers) if (next === undefined || at < next) next = at;
    if (next === undefined) return;
    this.#start();
    if (!this.#online) {
      if (this.#fallback) clearTimeout(this.#fallback);
      // A deadline already past fires on the next turn (a negative delay would make Node warn).
      this.#fallback = setTimeout(() => this.#tick(), Math.max(0, Number(next - process.hrtime.bigint()) / 1e6));
      this.#fallback.unref();
    }
    const armed = Atomics.load(this.#deadline, 0);
    if (armed === next) return;
    Atomics.store(this.#deadline, 0, next);
    // A later deadline needs no wake-up: the thread wakes at the earlier one, reads the new one
    // and sleeps on. Batchers re-arm on every request, so this keeps a wake-up off each of them.
    if (armed !== 0n && armed < next) return;
    Atomics.add(this.#wake, 0, 1);
    Atomics.notify(this.#wake, 0);
  }

  #start(): void {
    if (this.#worker || this.#broken) return;
    const worker = new Worker(WORKER_URL, {
      name: "galley:timers",
      workerData: { deadline: this.#deadline, wake: this.#wake },
    });
    worker.on("online", () => {
      this.#online = true;
    });
    worker.on("message", () => this.#tick());
    worker.on("error", () => {
      // Not expected (the thread only waits and posts); if it happens, setTimeout takes over for good.
      this.#online = false;
      this.#broken = true;
      this.#arm();
    });
    // After the listeners: adding a 'message' listener refs the worker's port again, which kept
    // the process alive after SIGTERM once the first timer had fired.
    worker.unref();
    this.#worker = worker;
  }
}

const timers = new PreciseTimers();

/** process.hrtime and microsecond timers (see PreciseTimers). Timers do not keep the process alive. */
export const systemClock: Clock = {
  now: () => process.hrtime.bigint(),
  setTimer: (callback, delayMs) => timers.set(callback, delayMs),
  clearTimer: (handle) => timers.clear(handle as Timer),
  soon: (callback) => {
    setImmediate(callback);
  },
};

/**
 * A trigger that runs `run` once at the end of the current event-loop turn however often it is
 * pulled during the turn (`clock.soon`): the schedulers look at a turn's arrivals together.
 */
export function onceThisTurn(clock: Clock, run: () => void): () => void {
  let queued = false;
  const now = () => {
    queued = false;
    run();
  };
  return () => {
    if (queued) return;
    queued = true;
    clock.soon(now);
  };
}
