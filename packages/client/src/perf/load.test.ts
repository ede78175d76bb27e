import { performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import { closedLoop, openLoop } from "./load.js";

describe("closedLoop", () => {
  it("keeps exactly `concurrency` requests in flight", async () => {
    let inFlight = 0;
    let most = 0;
    let sent = 0;
    const load = closedLoop(3, async () => {
      inFlight++;
      sent++;
      most = Math.max(most, inFlight);
      await new Promise((resolve) => setImmediate(resolve));
      inFlight--;
    });
    const from = performance.now();
    while (sent < 50) await new Promise((resolve) => setImmediate(resolve));
    await load.stop();
    expect(most).toBe(3);
    expect(load.inFlight).toBe(0);
    const records = load.take(from, performance.now() + 1);
    expect(records.length).toBe(sent);
    expect(records.every((r) => r.end >= r.start)).toBe(true);
    expect(load.take(from, performance.now() + 1)).toEqual([]);
  });
});

describe("openLoop", () => {
  it("sends on schedule whether or not earlier requests answered", async () => {
    const pending: (() => void)[] = [];
    // Read before the loop starts: a pause between its first send and this line (a busy machine)
    // would otherwise shorten the measured time.
    const start = performance.now();
    const load = openLoop(1000, () => new Promise<void>((resolve) => pending.push(resolve)));
    // Nothing has answered, yet requests keep going out at about a request per millisecond.
    while (pending.length < 40) await new Promise((resolve) => setTimeout(resolve, 1));
    const elapsed = performance.now() - start;
    expect(load.inFlight).toBe(pending.length);
    expect(elapsed).toBeGreaterThanOrEqual(38);
    const stopped = load.stop();
    for (const resolve of pending) resolve();
    await stopped;
    expect(load.inFlight).toBe(0);
  });

  it("holds requests that fall due while `maxInFlight` are outstanding, and sends them when one answers", async () => {
    const pending: (() => void)[] = [];
    const load = openLoop(2000, () => new Promise<void>((resolve) => pending.push(resolve)), "constant", 5);
    while (pending.length < 5) await new Promise((resolve) => setTimeout(resolve, 1));
    // Well past the time 5 more fell due: none was sent.
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(pending).toHaveLength(5);
    expect(load.inFlight).toBe(5);
    // One answer frees one slot: the overdue requests go out one per answer.
    pending.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
    expect(pending).toHaveLength(5);
    expect(load.inFlight).toBe(5);
    const stopped = load.stop();
    for (const resolve of pending) resolve();
    await stopped;
    expect(load.inFlight).toBe(0);
  });

  it("stops at the first failure and keeps it", async () => {
    const load = openLoop(500, async () => {
      throw new Error("refused");
    });
    while (load.error === undefined) await new Promise((resolve) => setTimeout(resolve, 1));
    await load.stop();
    expect((load.error as Error).message).toBe("refused");
  });
});
