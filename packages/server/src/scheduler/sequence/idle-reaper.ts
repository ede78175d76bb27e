import type { Clock } from "../../base/clock.js";
import type { Sequence } from "./sequence.js";

/**
 * Releases sequences idle longer than `max_sequence_idle_microseconds` (default 1 s): nothing
 * queued or executing since their last request. One timer, for the next expiry.
 */
export class IdleReaper {
  readonly #clock: Clock;
  readonly #idleNs: bigint;
  readonly #release: (sequence: Sequence) => void;
  #timer: unknown;

  /** `release` ends an expired sequence; it is called synchronously, once per sequence. */
  constructor(clock: Clock, idleMicroseconds: bigint, release: (sequence: Sequence) => void) {
    this.#clock = clock;
    this.#idleNs = (idleMicroseconds || 1_000_000n) * 1000n;
    this.#release = release;
  }

  /** Release the sequences already expired and set the timer for the next one. */
  reap(sequences: () => Iterable<Sequence>): void {
    this.stop();
    const now = this.#clock.now();
    let next: bigint | undefined;
    for (const sequence of [...sequences()]) {
      if (sequence.busy || sequence.queue.length > 0) continue;
      const expires = sequence.lastNs + this.#idleNs;
      if (expires <= now) this.#release(sequence);
      else if (next === undefined || expires < next) next = expires;
    }
    if (next !== undefined) {
      this.#timer = this.#clock.setTimer(
        () => {
          this.#timer = undefined;
          this.reap(sequences);
        },
        Number(next - now) / 1e6,
      );
    }
  }

  /** Clear the timer (the batcher has drained). */
  stop(): void {
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
  }
}
