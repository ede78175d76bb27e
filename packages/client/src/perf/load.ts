// Load generators: a closed loop (N requests always in flight, each caller sending its next request
// when the last one answers) and an open loop (requests sent on a schedule, whether or not earlier
// ones have answered). Both record when each request started and ended.
import { performance } from "node:perf_hooks";

/** One request: start and end in `performance.now()` milliseconds. */
export interface RequestRecord {
  start: number;
  end: number;
}

/** A running load; `take` hands out the records of requests that ended in a window. */
export interface LoadGenerator {
  /** Records of requests that ended in [from, to), removing them and anything older. */
  take(from: number, to: number): RequestRecord[];
  /** The first failure, if any request failed (the load stops sending). */
  readonly error: unknown;
  /** Requests sent so far that have not answered. */
  readonly inFlight: number;
  /** Stop sending and wait for requests in flight. */
  stop(): Promise<void>;
}

/** Sends one request; resolves when it has answered. */
export type Send = () => Promise<unknown>;

class Recorder {
  records: RequestRecord[] = [];
  error: unknown;
  failed = false;
  inFlight = 0;
  /** Called whenever a request settles (the open loop resumes a schedule held by its cap). */
  onSettled: (() => void) | undefined;
  readonly #drained: (() => void)[] = [];

  async send(send: Send): Promise<void> {
    this.inFlight++;
    const start = performance.now();
    try {
      await send();
      this.records.push({ start, end: performance.now() });
    } catch (error) {
      if (!this.failed) {
        this.failed = true;
        this.error = error;
      }
    } finally {
      this.inFlight--;
      if (this.inFlight === 0) for (const resolve of this.#drained.splice(0)) resolve();
      this.onSettled?.();
    }
  }

  drained(): Promise<void> {
    return this.inFlight === 0 ? Promise.resolve() : new Promise((resolve) => this.#drained.push(resolve));
  }

  take(from: number, to: number): RequestRecord[] {
    const taken: RequestRecord[] = [];
    const kept: RequestRecord[] = [];
    for (const record of this.records) {
      if (record.end >= to) kept.push(record);
      else if (record.end >= from) taken.push(record);
    }
    this.records = kept;
    return taken;
  }
}

/** `concurrency` callers, each sending its next request as soon as its last one answered. */
export function closedLoop(concurrency: number, send: Send): LoadGenerator {
  const recorder = new Recorder();
  let running = true;
  const callers = Array.from({ length: concurrency }, async () => {
    while (running && !recorder.failed) await recorder.send(send);
  });
  return generator(recorder, async () => {
    running = false;
    await Promise.all(callers);
  });
}

/**
 * `rate` requests per second on a schedule (evenly spaced, or with exponential gaps for
 * `poisson`), sent whether or not earlier ones have answered. Timers fire at best every
 * millisecond; requests that fell due meanwhile are sent together, so the rate holds on average.
 * At most `maxInFlight` requests are outstanding: when the server falls that far behind, requests
 * that fall due wait for one to answer (they are sent late, and the rate is not kept) rather than
 * opening connections without bound.
 */
export function openLoop(
  rate: number,
  send: Send,
  distribution: "constant" | "poisson" = "constant",
  maxInFlight = 256,
): LoadGenerator {
  const recorder = new Recorder();
  const gap = () => (distribution === "poisson" ? -Math.log(1 - Math.random()) : 1) * (1000 / rate);
  let due = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let held = false;
  let running = true;
  const tick = () => {
    timer = undefined;
    held = false;
    if (!running || recorder.failed) return;
    const now = performance.now();
    while (due <= now) {
      if (recorder.inFlight >= maxInFlight) {
        held = true;
        return;
      }
      void recorder.send(send);
      due += gap();
    }
    timer = setTimeout(tick, Math.max(0, due - performance.now()));
  };
  recorder.onSettled = () => {
    if (held) tick();
  };
  tick();
  return generator(recorder, async () => {
    running = false;
    if (timer) clearTimeout(timer);
    await recorder.drained();
  });
}

/** A load generator over its recorder; `stop` ends the sending the way the generator needs. */
function generator(recorder: Recorder, stop: () => Promise<void>): LoadGenerator {
  return {
    take: (from, to) => recorder.take(from, to),
    get error() {
      return recorder.error;
    },
    get inFlight() {
      return recorder.inFlight;
    },
    stop,
  };
}
