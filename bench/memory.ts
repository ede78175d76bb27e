// Memory under sustained load (issue 21, item 2): Galley serving the example repository (every
// model, as `npm start`), `--requests` `simple` requests (1,000,000 by default) over REST JSON,
// `--concurrency` at a time, in `--steps` equal steps; after each step the server process's RSS
// (VmRSS from /proc) is printed, so the curve shows whether it grows. Target: the last reading
// ≤ 1.05 × the reading after the first step (which includes warm-up: JIT, buffers, sockets).
// Beside RSS it prints the V8 heap's resident size, its young generation's, and external memory,
// and the growth of RSS less the young generation: V8 grows the young generation under load up
// to its own limit, doubling it in steps of tens of MB, which is not a leak. Galley runs with the V8
// flag `galley serve` runs with (its young generation capped); `--node-flags=` measures V8's defaults.
//
//   npx tsx bench/memory.ts [--requests=1000000] [--steps=20] [--concurrency=16] [--node-flags="..."]
import { readFileSync } from "node:fs";
import type { CountLoadJob, CountLoadResult } from "./lib/count-load-process.js";
import type { HeapReading } from "./lib/galley-example-process.js";
import { startChild } from "./lib/ipc.js";
import { GALLEY_SERVE_NODE_FLAGS, machineLine, option, textOption } from "./lib/setup.js";

const requests = option("requests", 1_000_000);
const steps = option("steps", 20);
const concurrency = option("concurrency", 16);

const rssMb = (pid: number) => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/);
  return Number(line?.[1] ?? 0) / 1024;
};

/** Galley's V8 flags: `galley serve`'s by default, `--node-flags=` for V8's own young-generation sizing. */
const nodeFlags = textOption("node-flags", GALLEY_SERVE_NODE_FLAGS.join(" "));
const galley = await startChild<{ http: number; pid: number }>(
  new URL("./lib/galley-example-process.ts", import.meta.url),
  [],
  { NODE_OPTIONS: nodeFlags },
);
const load = await startChild<null>(new URL("./lib/count-load-process.ts", import.meta.url));
const { pid, http } = galley.ready;
const idle = rssMb(pid);
console.log(
  `memory under load: ${requests} simple requests, REST JSON, c=${concurrency}, Galley's Node flags "${nodeFlags}"; ${machineLine()}`,
);
console.log(`idle after start: ${idle.toFixed(1)} MB RSS\n`);
console.log("requests     RSS MB   req/s   V8 heap MB   young gen. MB   external MB");
const curve: number[] = [];
/** RSS less the young generation, which V8 sizes to the allocation rate (up to its own limit), not a leak. */
const outsideYoung: number[] = [];
try {
  const per = Math.ceil(requests / steps);
  for (let step = 1; step <= steps; step++) {
    const job: CountLoadJob = { target: { kind: "http-json", port: http }, concurrency, requests: per };
    const result = await load.call<CountLoadResult>(job);
    if (result.errors > 0) throw new Error(`${result.errors} errors, first: ${result.firstError}`);
    const rss = rssMb(pid);
    curve.push(rss);
    const heap = await galley.call<HeapReading>(null);
    outsideYoung.push(rss - heap.young / 2 ** 20);
    const mb = (bytes: number, width: number) => (bytes / 2 ** 20).toFixed(1).padStart(width);
    console.log(
      `${String(step * per).padStart(8)}  ${rss.toFixed(1).padStart(8)}  ${Math.round(per / (result.wallMs / 1000))
        .toString()
        .padStart(6)}  ${mb(heap.heap, 11)}  ${mb(heap.young, 14)}  ${mb(heap.external, 12)}`,
    );
  }
} finally {
  await load.stop();
  await galley.stop();
}
const first = curve[0] ?? 0;
const last = curve.at(-1) ?? 0;
const growth = last / first - 1;
const rest = (outsideYoung.at(-1) ?? 0) / (outsideYoung[0] ?? 1) - 1;
console.log(
  `\ngrowth from the first step to the last: ${(growth * 100).toFixed(1)}% (target ≤ 5%: ${growth <= 0.05 ? "PASS" : "MISS"}); peak ${Math.max(...curve).toFixed(1)} MB`,
);
console.log(`the same without the young generation (RSS − young gen.): ${(rest * 100).toFixed(1)}%`);
