// The timer thread behind `systemClock`: it sleeps in `Atomics.wait` until the armed deadline, which
// the kernel honours to tens of microseconds, then tells the main thread. Node's own timers cannot
// wait less than a millisecond and fire on a millisecond clock, too coarse for
// `max_queue_delay_microseconds`.
import { parentPort, workerData } from "node:worker_threads";

const port = parentPort;
if (!port) throw new Error("timer-worker must run in a worker thread");
const { deadline, wake } = workerData as { deadline: BigInt64Array; wake: Int32Array };

for (;;) {
  const seen = Atomics.load(wake, 0);
  const at = Atomics.load(deadline, 0);
  if (at === 0n) {
    Atomics.wait(wake, 0, seen);
    continue;
  }
  const left = at - process.hrtime.bigint();
  if (left > 0n) {
    Atomics.wait(wake, 0, seen, Number(left) / 1e6);
    continue;
  }
  // Disarm only the deadline that fired: the main thread may have armed a new one meanwhile.
  if (Atomics.compareExchange(deadline, 0, at, 0n) === at) port.postMessage(at);
}
