// How busy the machine was with work other than this process during a measurement: the CPU time
// all processes used (from /proc/stat, Linux) minus this process's own (all its threads), in
// cores, and the share of time the hypervisor gave to other guests (steal). A benchmark whose
// halves saw different loads compared different machines.
import { readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";

interface Sample {
  /** Jiffies: busy, stolen, and all (busy + idle + iowait + steal). */
  busy: number;
  steal: number;
  total: number;
  /** This process's CPU time, µs. */
  own: number;
  at: number;
}

/** What other work used while a measurement ran. */
export interface MachineLoad {
  /** Cores busy with other processes, on average (NaN where /proc/stat is missing). */
  otherCores: number;
  /** Share (0..1) of the CPUs' time stolen by the hypervisor. */
  steal: number;
  /** The 1-minute load average at the end. */
  loadAverage: number;
}

function sample(): Sample | undefined {
  let line: string | undefined;
  try {
    line = readFileSync("/proc/stat", "utf8").split("\n")[0];
  } catch {
    return undefined;
  }
  // cpu user nice system idle iowait irq softirq steal
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = (line ?? "")
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const busy = user + nice + system + irq + softirq;
  const { user: ownUser, system: ownSystem } = process.cpuUsage();
  return { busy, steal, total: busy + idle + iowait + steal, own: ownUser + ownSystem, at: performance.now() };
}

/** Start watching; the returned function says what other work used since. */
export function watchMachineLoad(): () => MachineLoad {
  const start = sample();
  return () => {
    const end = sample();
    const loadAverage = loadavg()[0] ?? Number.NaN;
    if (!start || !end || end.total <= start.total) return { otherCores: Number.NaN, steal: Number.NaN, loadAverage };
    const span = end.total - start.total;
    const allCores = ((end.busy - start.busy) / span) * availableParallelism();
    const ownCores = (end.own - start.own) / 1000 / (end.at - start.at);
    return {
      otherCores: Math.max(0, allCores - ownCores),
      steal: (end.steal - start.steal) / span,
      loadAverage,
    };
  };
}
