import { create } from "@bufbuild/protobuf";
import { type ModelRateLimiter, ModelRateLimiterSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import { InstancePool } from "./instance-pool.js";
import { RateLimiter } from "./rate-limiter.js";

const needs = (count: number, priority = 1, global = false) =>
  create(ModelRateLimiterSchema, { resources: [{ name: "R", count, global }], priority });

/** Execute on an instance of a pool whose policy is `limiter`, as a scheduler does. */
function inPool(limiter: RateLimiter, instance: BackendInstance) {
  const pool = new InstancePool([instance], limiter);
  return { execute: () => pool.execute(instance, []) };
}

/** An instance that records when its executions start and finishes them when the test says so. */
function held(name: string, log: string[], rateLimiter?: ModelRateLimiter) {
  const finishes: (() => void)[] = [];
  const instance: BackendInstance = {
    name,
    ...(rateLimiter ? { rateLimiter } : {}),
    execute: () =>
      new Promise<ExecuteResult>((resolve) => {
        log.push(name);
        finishes.push(() => resolve({ responses: [], computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n }));
      }),
  };
  return { instance, finish: () => finishes.shift()?.() };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe("RateLimiter", () => {
  it("runs instances only while they hold their resources (capacity: the most any instance needs)", async () => {
    const limiter = new RateLimiter();
    const log: string[] = [];
    const a = held("a", log, needs(2));
    const b = held("b", log, needs(2));
    const la = inPool(limiter, a.instance);
    const lb = inPool(limiter, b.instance);
    const runs = [la.execute(), lb.execute()];
    await flush();
    expect(log).toEqual(["a"]);
    a.finish();
    await flush();
    expect(log).toEqual(["a", "b"]);
    b.finish();
    await Promise.all(runs);
  });

  it("lets instances run together when the explicit capacity allows", async () => {
    const limiter = new RateLimiter([{ name: "R", count: 4 }]);
    const log: string[] = [];
    const a = held("a", log, needs(2));
    const b = held("b", log, needs(2));
    const runs = [inPool(limiter, a.instance).execute(), inPool(limiter, b.instance).execute()];
    await flush();
    expect(log).toEqual(["a", "b"]);
    a.finish();
    b.finish();
    await Promise.all(runs);
  });

  it("weighs turns by priority: priority 2 gets half the turns of priority 1", async () => {
    const limiter = new RateLimiter();
    const log: string[] = [];
    const fast = held("p1", log, needs(1, 1));
    const slow = held("p2", log, needs(1, 2));
    const l1 = inPool(limiter, fast.instance);
    const l2 = inPool(limiter, slow.instance);
    const runs: Promise<unknown>[] = [];
    for (let i = 0; i < 6; i++) runs.push(l1.execute(), l2.execute());
    for (let i = 0; i < 12; i++) {
      await flush();
      (log.at(-1) === "p1" ? fast : slow).finish();
    }
    await Promise.all(runs);
    const firstNine = log.slice(0, 9);
    expect(firstNine.filter((n) => n === "p1").length).toBeGreaterThanOrEqual(5);
  });

  it("refuses an instance that needs more than --rate-limit-resource allows, with Triton's message", () => {
    const limiter = new RateLimiter([{ name: "R", count: 1 }]);
    expect(() => inPool(limiter, held("a", [], needs(3)).instance)).toThrow(
      'Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 3',
    );
  });

  it("refuses a resource used both globally and per device", () => {
    const limiter = new RateLimiter();
    limiter.register(needs(1, 1, true));
    expect(() => limiter.register(needs(1, 1, false))).toThrow(
      'Resource "R" is present as both global and device-specific resource in the model configuration.',
    );
  });
});
