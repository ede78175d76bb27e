/**
 * How long a session's runs take, by input size, from the runs it made (on the event loop or in
 * its worker thread, which reports the run's own time): the basis for deciding where the next
 * batch runs. Runs are grouped by the number of input elements, in powers of two; a group's
 * estimate comes from its last {@link WINDOW} runs (see below). A size never seen is estimated
 * from the nearest smaller group, scaled by the ratio of sizes (pessimistic: fixed costs scale
 * too), or else from the nearest larger one (a run does not get slower with fewer elements);
 * with no runs at all there is no estimate.
 *
 * The times are wall-clock, so on a busy machine many runs include time the thread spent
 * preempted, which only ever adds: the estimate is the fastest run of the window, the run's own
 * cost. (On the 2-vCPU VM under load average 6-14, `simple`'s runs inside the HTTP server took
 * 35-61 µs at best, 80-96 µs at the median and 170-190 µs at p90 — caches are cold between
 * requests — against 16-36 µs in a tight loop; a median would flip it to a worker, where the hop
 * costs more than the whole run.) A model whose run time varies with the data more than with the
 * input size is estimated by its fast runs: give it a lower `inline_max_run_us`, or 0.
 */
export class RunCost {
  readonly #groups = new Map<number, number[]>();

  /** Record one run of a batch of `elements` input elements that took `ns`. */
  observe(elements: number, ns: number): void {
    const group = groupOf(elements);
    let runs = this.#groups.get(group);
    if (!runs) {
      runs = [];
      this.#groups.set(group, runs);
    }
    runs.push(ns);
    if (runs.length > WINDOW) runs.shift();
  }

  /** Whether runs of about this size were seen (the estimate is not extrapolated). */
  seen(elements: number): boolean {
    return this.#groups.has(groupOf(elements));
  }

  /** The expected time of a run of `elements` input elements in ns, or undefined when unknown. */
  estimate(elements: number): number | undefined {
    const group = groupOf(elements);
    const own = this.#groups.get(group);
    if (own) return fastest(own);
    let below: number | undefined;
    let above: number | undefined;
    for (const g of this.#groups.keys()) {
      if (g < group && (below === undefined || g > below)) below = g;
      if (g > group && (above === undefined || g < above)) above = g;
    }
    if (below !== undefined) return fastest(this.#groups.get(below) ?? []) * 2 ** (group - below);
    if (above !== undefined) return fastest(this.#groups.get(above) ?? []);
    return undefined;
  }
}

/** Runs kept per size group. */
export const WINDOW = 16;

function groupOf(elements: number): number {
  return elements <= 1 ? 0 : Math.ceil(Math.log2(elements));
}

function fastest(values: readonly number[]): number {
  return values.length === 0 ? 0 : Math.min(...values);
}
