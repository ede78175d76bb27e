import { describe, expect, it } from "vitest";
import { TurnBudget } from "./turn-budget.js";

/** Resolves at the end of the next turn (after the budget's own turn, which was armed first). */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("TurnBudget", () => {
  it("starts up to its budget at once, the rest in later turns, first come first served", async () => {
    const budget = new TurnBudget(3);
    const started: number[] = [];
    for (let i = 0; i < 8; i++) budget.start(() => started.push(i));
    expect(started).toEqual([0, 1, 2]);
    expect(budget.waiting).toBe(5);
    await nextTurn();
    expect(started).toEqual([0, 1, 2, 3, 4, 5]);
    // Work that arrives while others wait goes behind them, even with budget left.
    budget.start(() => started.push(8));
    await nextTurn();
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    expect(budget.waiting).toBe(0);
  });

  it("gives a new turn a new budget", async () => {
    const budget = new TurnBudget(2);
    const started: string[] = [];
    budget.start(() => started.push("a"));
    budget.start(() => started.push("b"));
    await nextTurn();
    budget.start(() => started.push("c"));
    budget.start(() => started.push("d"));
    expect(started).toEqual(["a", "b", "c", "d"]);
  });

  it("lets work started in a turn start more work, within the budget", async () => {
    const budget = new TurnBudget(2);
    const started: string[] = [];
    budget.start(() => {
      started.push("outer");
      budget.start(() => started.push("inner"));
      budget.start(() => started.push("later"));
    });
    expect(started).toEqual(["outer", "inner"]);
    await nextTurn();
    expect(started).toEqual(["outer", "inner", "later"]);
  });
});
