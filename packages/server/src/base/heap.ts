// Asking V8 for collections the server needs at known moments (not on the request path).
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

type Gc = (options?: {
  type?: "major" | "minor";
  execution?: "sync" | "async";
  flavor?: "regular" | "last-resort";
}) => void;

let gc: Gc | undefined;

/** V8's `gc()`, without `--expose-gc` on the command line (the flag applies to contexts made after it). */
export function collector(): Gc {
  if (!gc) {
    setFlagsFromString("--expose-gc");
    gc = runInNewContext("gc") as Gc;
    // V8's flags are the process's: contexts made later (models' worker threads) get no `gc`.
    setFlagsFromString("--no-expose-gc");
  }
  return gc;
}

/**
 * Release what start-up left behind: one full, memory-reducing collection, which also shrinks
 * the young generation V8 grew while the models loaded (~15 MiB of a ~150 MiB idle server on
 * Node 26; Node 20 keeps its young generation). It takes ~50 ms on a 2-vCPU VM, so it runs once
 * the startup loads are done and before the endpoints open, where no request waits on it.
 * Under load the young generation grows back as V8 sees fit.
 */
export function shrinkHeap(): void {
  collector()({ type: "major", execution: "sync", flavor: "last-resort" });
}
