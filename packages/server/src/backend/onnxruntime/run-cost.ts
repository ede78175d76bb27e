/**
 * How long a session's runs take, by input size, from the runs it made (on the event loop or in
 * its worker thread, which reports the run's own time): the basis for deciding where the next
 * batch runs. Runs are grouped by the number of input elements, in powers of two; a group's
 * estimate is a low quantile of its last {@link WINDOW} runs, so runs stretched by preemption
 * do not move it. A size never seen is estimated from the nearest smaller group, scaled by the
 * ratio of sizes (pessimistic: fixed costs scale too), or else from the nearest larger one (a run
 * does not get slower with fewer elements); with no runs at all there is no estimate.
 *
 * The times are wall-clock, so on a busy machine some runs include time the thread spent
 * preempted, which only ever adds: the estimate is the lower quartile of the window rather than
 * its median, which stays near the run's own cost while other processes hold the cores.
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
    if (own) return lowQuartile(own);
    let below: number | undefined;
    let above: number | undefined;
    for (const g of this.#groups.keys()) {
      if (g < group && (below === undefined || g > below)) below = g;
      if (g > group && (above === undefined || g < above)) above = g;
    }
    if (below !== undefined) return lowQuartile(this.#groups.get(below) ?? []) * 2 ** (group - below);
    if (above !== undefined) return lowQuartile(this.#groups.get(above) ?? []);
    return undefined;
  }
}

/** Runs kept per size group. */
export const WINDOW = 8;

function groupOf(elements: number): number {
  return elements <= 1 ? 0 : Math.ceil(Math.log2(elements));
}

function lowQuartile(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 4)] ?? 0;
}
