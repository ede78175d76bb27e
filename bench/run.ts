// All three benchmarks, then one summary of the issues' targets. Informational: always exits 0.
// Run: npx tsx bench/run.ts [--reps=N] [--duration=S] [--samples=N] [--model=simple|identity] [--elements=N]
// (throughput.ts's two scenarios, `simple` and the FP32 identity, both appear in the summary)
import { measureBatching } from "./batching.js";
import { measureLatency } from "./latency.js";
import { machineLine } from "./lib/setup.js";
import { table } from "./lib/stats.js";
import { measureThroughput } from "./throughput.js";

console.log(`Galley benchmarks: ${machineLine()}`);
const results = [...(await measureLatency()), ...(await measureThroughput()), ...(await measureBatching())];
console.log("\nSummary against the issue's targets (median [min–max] over repetitions; PASS/MISS on the median)\n");
console.log(
  table(
    ["target", "measured", "goal", "verdict"],
    results.map((r) => [r.name, r.measured, r.goal, r.verdict]),
  ),
);
