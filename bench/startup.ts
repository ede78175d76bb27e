// Start-up and idle memory (issue 21, items 2 and 3): `galley serve` from built code on a model
// repository (the example repository, as `npm start`, by default), measured from process start
// to the "Ready:" log line (wall time, and the process's CPU time at that moment from /proc), then
// RSS and threads after `--idle-ms` of idleness. Each repetition runs every variant once, in turn:
//
// - `cold`: Node's compile cache in a fresh, empty folder (a first start after install);
// - `warm`: the same folder again (every later start);
// - `off`: NODE_DISABLE_COMPILE_CACHE=1;
// - `before`: with --before=<checkout>, that checkout's build (cache as it does by default).
//
// Targets: ready ≤ 1.0 s, idle RSS ≤ 150 MB.
//
//   npx tsx bench/startup.ts [--reps=5] [--idle-ms=3000] [--repository=examples/model_repository] [--before=<checkout>]
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { GALLEY_SERVE_NODE_FLAGS, machineLine, option } from "./lib/setup.js";
import { formatSpread, spread } from "./lib/stats.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const reps = option("reps", 5);
const idleMs = option("idle-ms", 3000);
const text = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const repository = resolve(text("repository") ?? join(ROOT, "examples/model_repository"));
const before = text("before");
const TICKS = 100; // USER_HZ: /proc/<pid>/stat's clock ticks per second on Linux.

interface Reading {
  wallS: number;
  cpuS: number;
  rssMb: number;
  threads: number;
}

/** One start: spawn, wait for "Ready:" on the log (an output event, not a poll), read /proc, stop. */
async function start(cli: string, env: NodeJS.ProcessEnv): Promise<Reading> {
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [
      ...GALLEY_SERVE_NODE_FLAGS,
      cli,
      "serve",
      `--model-repository=${repository}`,
      "--http-port=0",
      "--grpc-port=0",
      "--metrics-port=0",
    ],
    { env, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  const exited = new Promise<number | null>((done) => child.once("exit", done));
  const ready = await new Promise<number>((done, fail) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("] Ready:")) done(performance.now());
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    void exited.then((code) => fail(new Error(`galley exited (${code}) before it was ready:\n${output.slice(-2000)}`)));
  });
  const pid = child.pid as number;
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name (which may hold spaces) start at field 3; utime, stime are 14, 15.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const cpuS = (Number(fields[11]) + Number(fields[12])) / TICKS;
  // Idle is the point of this measurement: waiting is what is measured, not synchronisation.
  await sleep(idleMs);
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssMb = Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0) / 1024;
  const threads = Number(status.match(/Threads:\s+(\d+)/)?.[1] ?? 0);
  child.kill("SIGTERM");
  await exited;
  return { wallS: (ready - started) / 1000, cpuS, rssMb, threads };
}

const current = join(ROOT, "packages/server/dist/cli/galley.js");
const cacheDir = mkdtempSync(join(tmpdir(), "galley-bench-compile-cache-"));
const base = { ...process.env };
delete base.NODE_COMPILE_CACHE;
delete base.NODE_DISABLE_COMPILE_CACHE;
const variants: [string, string, () => NodeJS.ProcessEnv][] = [
  [
    "cold",
    current,
    () => {
      rmSync(cacheDir, { recursive: true, force: true });
      return { ...base, NODE_COMPILE_CACHE: cacheDir };
    },
  ],
  ["warm", current, () => ({ ...base, NODE_COMPILE_CACHE: cacheDir })],
  ["off", current, () => ({ ...base, NODE_DISABLE_COMPILE_CACHE: "1" })],
];
if (before) variants.push(["before", join(resolve(before), "packages/server/dist/cli/galley.js"), () => base]);

console.log(`start-up and idle memory: ${repository}, ${reps} repetitions, idle ${idleMs} ms; ${machineLine()}\n`);
const readings = new Map<string, Reading[]>(variants.map(([name]) => [name, []]));
try {
  for (let rep = 0; rep < reps; rep++) {
    for (const [name, cli, env] of variants) readings.get(name)?.push(await start(cli, env()));
  }
} finally {
  rmSync(cacheDir, { recursive: true, force: true });
}

console.log("variant  wall to ready s       CPU to ready s        idle RSS MB            threads");
for (const [name, list] of readings) {
  const column = (pick: (r: Reading) => number, digits: number) =>
    formatSpread(spread(list.map(pick)), digits).padEnd(22);
  console.log(
    `${name.padEnd(8)} ${column((r) => r.wallS, 2)}${column((r) => r.cpuS, 2)}${column((r) => r.rssMb, 1)}${column((r) => r.threads, 0)}`,
  );
}
const warm = readings.get("warm") ?? [];
const wall = spread(warm.map((r) => r.wallS)).median;
const rss = spread(warm.map((r) => r.rssMb)).median;
console.log(
  `\nwarm: ready in ${wall.toFixed(2)} s (target ≤ 1.0: ${wall <= 1 ? "PASS" : "MISS"}), idle ${rss.toFixed(1)} MB (target ≤ 150: ${rss <= 150 ? "PASS" : "MISS"})`,
);
