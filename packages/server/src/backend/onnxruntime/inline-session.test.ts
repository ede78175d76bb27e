import { describe, expect, it } from "vitest";
import { RunCost, WINDOW } from "./inline-session.js";

describe("RunCost", () => {
  it("has no estimate before any run", () => {
    expect(new RunCost().estimate(32)).toBeUndefined();
  });

  it("estimates a size from the fastest of its recent runs (preemption only ever adds)", () => {
    const cost = new RunCost();
    for (const ns of [20_000, 21_000, 900_000, 19_000, 22_000]) cost.observe(32, ns);
    expect(cost.estimate(32)).toBe(19_000);
    expect(cost.seen(30)).toBe(true);
  });

  it("forgets runs older than its window", () => {
    const cost = new RunCost();
    for (let i = 0; i < WINDOW; i++) cost.observe(32, 10_000);
    for (let i = 0; i < WINDOW; i++) cost.observe(32, 500_000);
    expect(cost.estimate(32)).toBe(500_000);
  });

  it("extrapolates a larger size from the nearest smaller one, scaled by the size ratio", () => {
    const cost = new RunCost();
    cost.observe(32, 20_000); // group 5
    cost.observe(4096, 300_000); // group 12
    expect(cost.seen(256)).toBe(false);
    expect(cost.estimate(256)).toBe(20_000 * 8); // group 8
  });

  it("estimates a smaller size from the nearest larger one when nothing smaller was seen", () => {
    const cost = new RunCost();
    cost.observe(1024, 50_000);
    expect(cost.estimate(8)).toBe(50_000);
  });
});
