// Memory under sustained load (issue 21, item 2): Galley serving the example repository (every
// model, as `npm start`), `--requests` `simple` requests (1,000,000 by default) over REST JSON,
// `--concurrency` at a time, in `--steps` equal steps; after each step the server process's RSS
// (VmRSS from /proc) is printed, so the curve shows whether it grows. Target: the last reading
// ≤ 1.05 × the reading after the first step (which includes warm-up: JIT, buffers, sockets).
//
//   npx tsx bench/memory.ts [--requests=1000000] [--steps=20] [--concurrency=16]
import { readFileSync } from "node:fs";
import type { CountLoadJob, CountLoadResult } from "./lib/count-load-process.js";
import { startChild } from "./lib/ipc.js";
import { machineLine, option } from "./lib/setup.js";

const requests = option("requests", 1_000_000);
const steps = option("steps", 20);
const concurrency = option("concurrency", 16);

const rssMb = (pid: number) => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/);
  return Number(line?.[1] ?? 0) / 1024;
};

const galley = await startChild<{ http: number; pid: number }>(
  new URL("./lib/galley-example-process.ts", import.meta.url),
);
const load = await startChild<null>(new URL("./lib/count-load-process.ts", import.meta.url));
const { pid, http } = galley.ready;
const idle = rssMb(pid);
console.log(`memory under load: ${requests} simple requests, REST JSON, c=${concurrency}; ${machineLine()}`);
console.log(`idle after start: ${idle.toFixed(1)} MB RSS\n`);
console.log("requests     RSS MB   req/s");
const curve: number[] = [];
try {
  const per = Math.ceil(requests / steps);
  for (let step = 1; step <= steps; step++) {
    const job: CountLoadJob = { target: { kind: "http-json", port: http }, concurrency, requests: per };
    const result = await load.call<CountLoadResult>(job);
    if (result.errors > 0) throw new Error(`${result.errors} errors, first: ${result.firstError}`);
    const rss = rssMb(pid);
    curve.push(rss);
    console.log(
      `${String(step * per).padStart(8)}  ${rss.toFixed(1).padStart(8)}  ${Math.round(per / (result.wallMs / 1000))
        .toString()
        .padStart(6)}`,
    );
  }
} finally {
  await load.stop();
  await galley.stop();
}
const first = curve[0] ?? 0;
const last = curve.at(-1) ?? 0;
const growth = last / first - 1;
console.log(
  `\ngrowth from the first step to the last: ${(growth * 100).toFixed(1)}% (target ≤ 5%: ${growth <= 0.05 ? "PASS" : "MISS"}); peak ${Math.max(...curve).toFixed(1)} MB`,
);
