import { describe, expect, it } from "vitest";
import type { Clock } from "../base/clock.js";
import { InferenceError } from "../base/errors.js";
import { OnDemandLoads } from "./on-demand.js";

/** Timers the test fires by hand. */
function manualClock(): Clock & { fire(): void } {
  const timers = new Set<() => void>();
  return {
    now: () => 0n,
    setTimer: (callback) => {
      timers.add(callback);
      return callback;
    },
    clearTimer: (handle) => {
      timers.delete(handle as () => void);
    },
    soon: (callback) => setImmediate(callback),
    fire() {
      for (const timer of [...timers]) {
        timers.delete(timer);
        timer();
      }
    },
  };
}

function deferred() {
  let resolve!: () => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<void>((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
}

const unknown = (name: string) => new InferenceError("MODEL_NOT_FOUND", { model: name });

describe("OnDemandLoads", () => {
  it("starts one load for every request that waits meanwhile, and counts it", async () => {
    const load = deferred();
    let loads = 0;
    const onDemand = new OnDemandLoads({
      clock: manualClock(),
      inRepository: async () => true,
      load: () => {
        loads++;
        return load.promise;
      },
    });
    const waits = [1, 2, 3].map(() => onDemand.wait("m", unknown("m"), {}, ""));
    await new Promise((resolve) => setImmediate(resolve));
    expect(onDemand.waiting.get("m")).toBe(3);
    load.resolve();
    await Promise.all(waits);
    expect(loads).toBe(1);
    expect(onDemand.counts.get("m")).toBe(1);
    expect(onDemand.waiting.size).toBe(0);
  });

  it("answers a name that is not in the repository with its lookup error, loading nothing", async () => {
    let loads = 0;
    const onDemand = new OnDemandLoads({
      clock: manualClock(),
      inRepository: async () => false,
      load: async () => {
        loads++;
      },
    });
    await expect(onDemand.wait("../x", unknown("../x"), {}, "")).rejects.toThrow(
      "Request for unknown model: '../x' is not found",
    );
    expect(loads).toBe(0);
    expect(onDemand.counts.size).toBe(0);
  });

  it("bounds the wait by the request's timeout and the server's limit; a failed load says why", async () => {
    const clock = manualClock();
    const load = deferred();
    const onDemand = new OnDemandLoads({
      clock,
      waitMs: 60_000,
      inRepository: async () => true,
      load: () => load.promise,
    });
    const waiting = onDemand.wait("m", unknown("m"), { timeoutUs: 2_500_000 }, "");
    await new Promise((resolve) => setImmediate(resolve));
    clock.fire();
    await expect(waiting).rejects.toThrow(
      "Request for unknown model: 'm' has no available versions: still loading on demand after 2500 ms",
    );
    const second = onDemand.wait("m", unknown("m"), {}, "");
    load.reject(new Error("failed to load 'm', boom"));
    await expect(second).rejects.toMatchObject({
      code: "UNAVAILABLE",
      message:
        "Request for unknown model: 'm' has no available versions: loading it on demand failed: failed to load 'm', boom",
    });
  });

  it("stops waiting when the request is cancelled", async () => {
    const onDemand = new OnDemandLoads({
      clock: manualClock(),
      inRepository: async () => true,
      load: () => new Promise(() => {}),
    });
    const controller = new AbortController();
    const waiting = onDemand.wait("m", unknown("m"), { signal: controller.signal }, "r1");
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ code: "CANCELLED", message: "[request id: r1] request cancelled" });
  });
});
