import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import { type ExecutionPolicy, InstancePool } from "./instance-pool.js";

const result: ExecuteResult = { responses: [], computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n };

function instance(name: string, started: string[]): BackendInstance {
  return {
    name,
    execute: async () => {
      started.push(name);
      return result;
    },
  };
}

describe("InstancePool", () => {
  it("hands out the instance idle longest, or the one asked for, until it is given back", () => {
    const [a, b, c] = ["a", "b", "c"].map((n) => instance(n, []));
    const pool = new InstancePool([a, b, c] as BackendInstance[]);
    expect(pool.take()).toBe(a);
    expect(pool.take(c as BackendInstance)).toBe(true);
    expect(pool.take(c as BackendInstance)).toBe(false);
    expect(pool.isIdle(b as BackendInstance)).toBe(true);
    expect(pool.take()).toBe(b);
    expect(pool.hasIdle).toBe(false);
    expect(pool.take()).toBeUndefined();
    pool.give(c as BackendInstance);
    pool.give(a as BackendInstance);
    expect(pool.take()).toBe(c);
  });

  it("starts a batch at once without a policy, and only in its turn with one", async () => {
    const started: string[] = [];
    const a = instance("a", started);
    void new InstancePool([a]).execute(a, []);
    expect(started).toEqual(["a"]);

    const admitted: string[] = [];
    const turns: (() => void)[] = [];
    let ended = 0;
    const policy: ExecutionPolicy = {
      admit: (i) => void admitted.push(i.name),
      acquire: () => new Promise((resolve) => turns.push(() => resolve(() => ended++))),
    };
    const b = instance("b", started);
    const pool = new InstancePool([b], policy);
    expect(admitted).toEqual(["b"]);
    const run = pool.execute(b, []);
    await new Promise((resolve) => setImmediate(resolve));
    expect(started).toEqual(["a"]);
    turns.shift()?.();
    await run;
    expect(started).toEqual(["a", "b"]);
    expect(ended).toBe(1);
  });

  it("offers an instance once per batch it takes at once, a second batch only when every one has one", () => {
    const [a, b] = ["a", "b"].map((n) => instance(n, []));
    const deep = { ...(a as BackendInstance), depth: 2 };
    const pool = new InstancePool([deep, b as BackendInstance]);
    expect(pool.take()).toBe(deep);
    expect(pool.take()).toBe(b);
    expect(pool.take()).toBe(deep);
    expect(pool.take()).toBeUndefined();
    pool.give(deep);
    expect(pool.take()).toBe(deep);
    // Capped at 4, and once each under sequence batching (not pipelined).
    const greedy = { ...(b as BackendInstance), depth: 100 };
    const capped = new InstancePool([greedy]);
    expect([1, 2, 3, 4, 5].map(() => capped.take())).toEqual([greedy, greedy, greedy, greedy, undefined]);
    const sequences = new InstancePool([deep], undefined, false);
    expect(sequences.take()).toBe(deep);
    expect(sequences.take()).toBeUndefined();
  });
});
