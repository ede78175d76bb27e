// How late a scheduler's timer fires: Node's setTimeout against Galley's timer thread
// (`systemClock`, packages/server/src/base/clock.ts), which the dynamic and sequence batchers
// use for `max_queue_delay_microseconds` and request timeouts. Each row asks for a delay,
// sequentially, and reports how long the callback actually took to run, p50 and p99 in µs.
//
//   (cd packages/server && npx tsc -p tsconfig.build.json) && npx tsx bench/timers.ts [--reps=5] [--samples=300]
import { loadavg } from "node:os";
import { systemClock } from "../packages/server/src/base/clock.js";
import { option } from "./lib/setup.js";
import { formatSpread, percentile, spread, table } from "./lib/stats.js";

const reps = option("reps", 5);
const samples = option("samples", 300);
const DELAYS_MS = [0.1, 0.5, 2];

type Timer = (callback: () => void, delayMs: number) => void;
const timers: [string, Timer][] = [
  ["setTimeout", (callback, delayMs) => setTimeout(callback, delayMs)],
  ["Galley's timer thread", (callback, delayMs) => systemClock.setTimer(callback, delayMs)],
];

async function lateness(timer: Timer, delayMs: number): Promise<{ p50: number; p99: number }> {
  const took: number[] = [];
  for (let i = 0; i < samples; i++) {
    const start = process.hrtime.bigint();
    await new Promise<void>((resolve) => timer(resolve, delayMs));
    took.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  return { p50: percentile(took, 50), p99: percentile(took, 99) };
}

console.log(`load average ${loadavg()[0]?.toFixed(2)}; ${reps} reps × ${samples} timers per row`);
await new Promise<void>((resolve) => systemClock.setTimer(resolve, 1)); // start the thread
const results = new Map<string, { p50: number[]; p99: number[] }>();
for (let rep = 0; rep < reps; rep++) {
  for (const delay of DELAYS_MS) {
    for (const [name, timer] of timers) {
      const key = `${name}@${delay}`;
      const { p50, p99 } = await lateness(timer, delay);
      const row = results.get(key) ?? { p50: [], p99: [] };
      row.p50.push(p50);
      row.p99.push(p99);
      results.set(key, row);
    }
  }
}
const rows = DELAYS_MS.flatMap((delay) =>
  timers.map(([name]) => {
    const row = results.get(`${name}@${delay}`) ?? { p50: [], p99: [] };
    return [`${delay * 1000} µs`, name, formatSpread(spread(row.p50), 0), formatSpread(spread(row.p99), 0)];
  }),
);
console.log(table(["asked", "timer", "fired after, p50 µs", "p99 µs"], rows));
process.exit(0);
