/** Time for schedulers: real by default, replaceable so tests control it. */
export interface Clock {
  /** Monotonic nanoseconds. */
  now(): bigint;
  setTimer(callback: () => void, delayMs: number): unknown;
  clearTimer(handle: unknown): void;
}

/** process.hrtime and setTimeout. Timers do not keep the process alive. */
export const systemClock: Clock = {
  now: () => process.hrtime.bigint(),
  setTimer: (callback, delayMs) => {
    const timer = setTimeout(callback, delayMs);
    timer.unref();
    return timer;
  },
  clearTimer: (handle) => clearTimeout(handle as NodeJS.Timeout),
};
