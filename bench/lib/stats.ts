// Order statistics for latency samples and for repeated measurements.

/** The p-th percentile (0..100) of samples, nearest-rank on a sorted copy. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

/** A repeated measurement: its median and the range the repetitions covered. */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

export function spread(values: readonly number[]): Spread {
  if (values.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  return { median: median(values), min: Math.min(...values), max: Math.max(...values) };
}

/** `12.3 [11.9–13.0]`: the median, then min–max of the repetitions. */
export function formatSpread(s: Spread, digits = 1): string {
  if (Number.isNaN(s.median)) return "n/a";
  return `${s.median.toFixed(digits)} [${s.min.toFixed(digits)}–${s.max.toFixed(digits)}]`;
}

/** Ratios of paired repetitions (a[i] / b[i]), so drift over the run cancels out. */
export function pairedRatios(a: readonly number[], b: readonly number[]): number[] {
  return a.slice(0, b.length).map((value, i) => value / (b[i] as number));
}

/** Differences of paired repetitions (a[i] − b[i]). */
export function pairedDifferences(a: readonly number[], b: readonly number[]): number[] {
  return a.slice(0, b.length).map((value, i) => value - (b[i] as number));
}

/** A fixed-width text table; the first column is left-aligned, the rest right-aligned. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join("  ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** A distribution-free confidence interval for the median: two order statistics and their coverage. */
export interface MedianInterval {
  low: number;
  high: number;
  /** The probability that the interval holds the true median (0..1). */
  coverage: number;
}

/**
 * The narrowest interval [x(k), x(n+1−k)] of the sorted values whose coverage is at
 * least `confidence`, k as large as that allows (the binomial(n, ½) order-statistic interval: it
 * assumes only that the values are independent draws). With fewer than 6 values no interval
 * reaches 95 %; then k is 1 and the coverage says how much less it is.
 */
export function medianInterval(values: readonly number[], confidence = 0.95): MedianInterval {
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  if (n === 0) return { low: Number.NaN, high: Number.NaN, coverage: 0 };
  // below[j] = P(Binomial(n, ½) < j).
  const below = [0];
  let term = 0.5 ** n;
  for (let j = 0; j <= n; j++) {
    below.push((below[j] as number) + term);
    term = (term * (n - j)) / (j + 1);
  }
  let k = 1;
  while (k + 1 <= Math.floor((n + 1) / 2) && 1 - 2 * (below[k + 1] as number) >= confidence) k++;
  return { low: sorted[k - 1] as number, high: sorted[n - k] as number, coverage: 1 - 2 * (below[k] as number) };
}
