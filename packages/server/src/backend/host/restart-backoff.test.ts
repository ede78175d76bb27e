import { describe, expect, it } from "vitest";
import { RESTART_BACKOFF_RESET_MS, RestartBackoff } from "./restart-backoff.js";

describe("RestartBackoff", () => {
  it("restarts at once, then waits 100 ms doubling up to 30 s", () => {
    const backoff = new RestartBackoff();
    const waits = Array.from({ length: 12 }, () => backoff.next(0));
    expect(waits).toEqual([0, 100, 200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000]);
  });

  it("starts over once the instance stayed up for 10 s", () => {
    const backoff = new RestartBackoff();
    expect([backoff.next(0), backoff.next(50), backoff.next(RESTART_BACKOFF_RESET_MS - 1)]).toEqual([0, 100, 200]);
    expect([backoff.next(RESTART_BACKOFF_RESET_MS), backoff.next(0)]).toEqual([0, 100]);
  });
});
