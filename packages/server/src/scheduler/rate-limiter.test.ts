import { create } from "@bufbuild/protobuf";
import { ModelRateLimiterSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import { RateLimiter, rateLimited } from "./rate-limiter.js";

const needs = (count: number, priority = 1, global = false) =>
  create(ModelRateLimiterSchema, { resources: [{ name: "R", count, global }], priority });

/** An instance that records when its executions start and finishes them when the test says so. */
function held(name: string, log: string[]) {
  const finishes: (() => void)[] = [];
  const instance: BackendInstance = {
    name,
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
    const a = held("a", log);
    const b = held("b", log);
    const la = rateLimited(a.instance, limiter, needs(2));
    const lb = rateLimited(b.instance, limiter, needs(2));
    const runs = [la.execute([]), lb.execute([])];
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
    const a = held("a", log);
    const b = held("b", log);
    const runs = [
      rateLimited(a.instance, limiter, needs(2)).execute([]),
      rateLimited(b.instance, limiter, needs(2)).execute([]),
    ];
    await flush();
    expect(log).toEqual(["a", "b"]);
    a.finish();
    b.finish();
    await Promise.all(runs);
  });

  it("weighs turns by priority: priority 2 gets half the turns of priority 1", async () => {
    const limiter = new RateLimiter();
    const log: string[] = [];
    const fast = held("p1", log);
    const slow = held("p2", log);
    const l1 = rateLimited(fast.instance, limiter, needs(1, 1));
    const l2 = rateLimited(slow.instance, limiter, needs(1, 2));
    const runs: Promise<unknown>[] = [];
    for (let i = 0; i < 6; i++) runs.push(l1.execute([]), l2.execute([]));
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
    expect(() => limiter.register(needs(3))).toThrow(
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
