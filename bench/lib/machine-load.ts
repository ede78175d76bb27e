// How busy the machine was with work other than the benchmark's during a measurement: the CPU
// time all processes used (from /proc/stat, Linux) minus this process's (all its threads) and
// that of the processes the benchmark runs beside it (a database server and its children), in
// cores, and the share of time the hypervisor gave to other guests (steal). Both halves of a
// comparison ran on the machine that was left.
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";

interface Sample {
  /** Clock ticks over all CPUs: busy, stolen, and all (busy + idle + iowait + steal). */
  busy: number;
  steal: number;
  total: number;
  cpus: number;
  /** Clock ticks this process and the helpers used. */
  ours: number;
  helpers: number;
}

/** What other work used while a measurement ran. */
export interface MachineLoad {
  /** Cores busy with other processes, on average (NaN where /proc is missing). */
  otherCores: number;
  /** Cores the helper processes (e.g. PostgreSQL) used, on average. */
  helperCores: number;
  /** Share (0..1) of the CPUs' time stolen by the hypervisor. */
  steal: number;
  /** The 1-minute load average at the end. */
  loadAverage: number;
}

/** utime + stime of a process, in clock ticks (0 when it is gone). */
function processTicks(pid: number | "self"): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The fields after the command name (which may hold spaces), from field 3 (state) on.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

/** `pid` and its children. */
function family(pid: number): number[] {
  const pids = [pid];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) pids.push(Number(entry));
    } catch {}
  }
  return pids;
}

function sample(helpers: readonly number[]): Sample | undefined {
  let lines: string[];
  try {
    lines = readFileSync("/proc/stat", "utf8").split("\n");
  } catch {
    return undefined;
  }
  // cpu user nice system idle iowait irq softirq steal
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = (lines[0] ?? "")
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const busy = user + nice + system + irq + softirq;
  return {
    busy,
    steal,
    total: busy + idle + iowait + steal,
    cpus: lines.filter((line) => /^cpu\d+ /.test(line)).length,
    ours: processTicks("self"),
    helpers: helpers.flatMap(family).reduce((sum, pid) => sum + processTicks(pid), 0),
  };
}

/**
 * Start watching; the returned function says what other work used since. `helpers`: process
 * ids (with their children) counted apart, as part of what is measured, not as other work.
 */
export function watchMachineLoad(helpers: readonly number[] = []): () => MachineLoad {
  const start = sample(helpers);
  return () => {
    const end = sample(helpers);
    const loadAverage = loadavg()[0] ?? Number.NaN;
    if (!start || !end || end.total <= start.total) {
      return { otherCores: Number.NaN, helperCores: Number.NaN, steal: Number.NaN, loadAverage };
    }
    // Ticks over all CPUs per CPU: the span in ticks of one CPU.
    const span = (end.total - start.total) / end.cpus;
    const helperTicks = end.helpers - start.helpers;
    const other = end.busy - start.busy - (end.ours - start.ours) - helperTicks;
    return {
      otherCores: Math.max(0, other / span),
      helperCores: helperTicks / span,
      steal: (end.steal - start.steal) / (end.total - start.total),
      loadAverage,
    };
  };
}
