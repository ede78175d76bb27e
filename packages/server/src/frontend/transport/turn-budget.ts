/**
 * How many requests the frontends start in one turn of the event loop, together: the REST
 * listener's (lean and Node's paths) and the gRPC listener's. The requests past it wait, in the
 * order they came, for the next turn.
 *
 * Why: libuv accepts one connection each time it polls (libuv 1.45, Node 20 on). With a thousand
 * busy connections a turn started every request their reads held, some 200 of them (~20 ms), so
 * the loop polled ~50 times a second and new connections waited in the kernel's accept queue for
 * seconds (with 1,000 connections opened at once, a few hundred first requests took 4–13 s while
 * later ones took < 0.3 s). Capped, a turn is a few ms of work, the loop polls (and accepts) a few
 * hundred times a second, and batching in the scheduler still sees up to this many requests a
 * turn. Measured in bench/README.md ("new connections under load").
 */
export const REQUESTS_PER_TURN = 16;

/** Starts work at most {@link REQUESTS_PER_TURN} times a turn, the rest first come first served in later turns. */
export class TurnBudget {
  #used = 0;
  #waiting: (() => void)[] = [];
  #head = 0;
  #armed = false;

  constructor(readonly perTurn: number = REQUESTS_PER_TURN) {}

  /** Run `work` now if this turn has room, else in a later turn, after the work that waits before it. */
  start(work: () => void): void {
    this.#arm();
    if (this.#used < this.perTurn && this.#head === this.#waiting.length) {
      this.#used++;
      work();
    } else this.#waiting.push(work);
  }

  /** Work waiting for a later turn. */
  get waiting(): number {
    return this.#waiting.length - this.#head;
  }

  #arm(): void {
    if (this.#armed) return;
    this.#armed = true;
    setImmediate(this.#turn);
  }

  // At the end of a turn (the loop's check phase, after its reads): a new budget, spent first on
  // the work that waits; what arrives in the next poll takes what is left.
  #turn = (): void => {
    this.#armed = false;
    this.#used = 0;
    while (this.#head < this.#waiting.length && this.#used < this.perTurn) {
      this.#used++;
      const work = this.#waiting[this.#head] as () => void;
      this.#waiting[this.#head++] = NOTHING;
      work();
    }
    if (this.#head === this.#waiting.length) {
      this.#waiting = [];
      this.#head = 0;
    } else this.#arm();
  };
}

function NOTHING(): void {}

/** The one budget of this process's frontends (one event loop). */
export const requestTurns = new TurnBudget();
