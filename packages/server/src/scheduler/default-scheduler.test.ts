// The default scheduler's turn: requests start at the end of the event-loop turn they arrived in,
// one at a time per instance, in arrival order; one cancelled before then never runs.
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import type { DeviceMemoryReading } from "../base/device-memory.js";
import type { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { createLogger } from "../base/log.js";
import { ModelStatistics } from "../base/statistics.js";
import { BatchMemory } from "./batch-memory.js";
import { DefaultScheduler } from "./default-scheduler.js";
import { GpuMemoryAdmission } from "./gpu-memory-admission.js";
import { InstancePool } from "./instance-pool.js";

/** An instance that records each request it starts and finishes it when the test says so. */
class HeldInstance implements BackendInstance {
  readonly name = "m_0";
  constructor(readonly device?: number) {}
  readonly started: string[] = [];
  readonly #finish: (() => void)[] = [];
  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    this.started.push(...requests.map((r) => r.id));
    return new Promise((resolve) => {
      this.#finish.push(() =>
        resolve({
          responses: requests.map(() => []),
          computeInputNs: 1n,
          computeInferNs: 1n,
          computeOutputNs: 1n,
          peakWorkingBytes: 300,
        }),
      );
    });
  }
  finishNext(): void {
    this.#finish.shift()?.();
  }
}

const request = (id: string, signal?: AbortSignal): InferenceRequest => ({
  modelName: "m",
  modelVersion: "",
  id,
  parameters: {},
  inputs: [],
  outputs: [],
  ...(signal ? { signal } : {}),
});
const endOfTurn = () => new Promise((resolve) => setImmediate(resolve));

describe("DefaultScheduler", () => {
  it("spreads requests over instances on different GPUs in Triton's order, and counts executions per GPU", async () => {
    // gpus: [0, 1], count: 2 → instances on 0, 1, 0, 1 (groupInstances' order).
    const instances = [0, 1, 0, 1].map((device) => new HeldInstance(device));
    const stats = new ModelStatistics();
    const scheduler = new DefaultScheduler(new InstancePool(instances), stats);
    const two = ["a", "b"].map((id) => scheduler.enqueue(request(id), 4));
    await endOfTurn();
    // Two requests at once: one on each GPU, not both on GPU 0.
    expect(instances.map((i) => i.started)).toEqual([["a"], ["b"], [], []]);
    for (const i of instances) i.finishNext();
    await Promise.all(two);
    const five = ["c", "d", "e", "f", "g"].map((id) => scheduler.enqueue(request(id), 2));
    await endOfTurn();
    for (const i of instances) i.finishNext();
    await Promise.all(five.slice(0, 4));
    await endOfTurn();
    for (const i of instances) i.finishNext();
    await Promise.all(five);
    expect([...stats.gpus.keys()].sort()).toEqual([0, 1]);
    const total = (d: number) => stats.gpus.get(d)?.executionCount ?? 0;
    expect(total(0) + total(1)).toBe(7);
    expect(Math.abs(total(0) - total(1))).toBeLessThanOrEqual(1);
    expect((stats.gpus.get(0)?.inferenceCount ?? 0) + (stats.gpus.get(1)?.inferenceCount ?? 0)).toBe(2 * 4 + 5 * 2);
    // A CPU instance adds to the model's counts only.
    const cpu = new ModelStatistics();
    const one = new HeldInstance();
    const done = new DefaultScheduler(new InstancePool([one]), cpu).enqueue(request("h"), 1);
    await endOfTurn();
    one.finishNext();
    await done;
    expect(cpu.executionCount).toBe(1);
    expect(cpu.gpus.size).toBe(0);
  });

  it("starts a turn's requests at the end of the turn, one at a time per instance, in order", async () => {
    const instance = new HeldInstance();
    const stats = new ModelStatistics();
    const scheduler = new DefaultScheduler(new InstancePool([instance]), stats);
    const done = ["a", "b", "c"].map((id) => scheduler.enqueue(request(id), 1));
    expect(instance.started).toEqual([]);
    expect(stats.pending).toBe(3);
    await endOfTurn();
    expect(instance.started).toEqual(["a"]);
    instance.finishNext();
    await done[0];
    expect(instance.started).toEqual(["a", "b"]);
    instance.finishNext();
    await done[1];
    instance.finishNext();
    await Promise.all(done);
    expect(instance.started).toEqual(["a", "b", "c"]);
    expect(stats.pending).toBe(0);
  });

  it("never runs a request cancelled before its turn ends, and runs the next one", async () => {
    const instance = new HeldInstance();
    const scheduler = new DefaultScheduler(new InstancePool([instance]), new ModelStatistics());
    const abort = new AbortController();
    const cancelled = scheduler.enqueue(request("gone", abort.signal), 1).catch((e: InferenceError) => e.message);
    const kept = scheduler.enqueue(request("kept"), 1);
    abort.abort();
    expect(await cancelled).toBe("[request id: gone] request cancelled");
    await endOfTurn();
    expect(instance.started).toEqual(["kept"]);
    instance.finishNext();
    await kept;
  });

  it("with GPU-memory admission, a request starts only when its working memory fits; past the wait, UNAVAILABLE", async () => {
    let free = 100;
    const reader = {
      read: async () =>
        new Map<number, DeviceMemoryReading>([[0, { freeBytes: free, usedBytes: 0, totalBytes: 1000 }]]),
      releaseCache: async () => {},
    };
    const gate = new GpuMemoryAdmission({
      reader,
      reserveBytes: 0,
      waitMs: 50,
      log: createLogger({ write: () => {} }),
    });
    await gate.refresh();
    const memory = new BatchMemory();
    memory.record(1, 300);
    const instance = new HeldInstance(0);
    const stats = new ModelStatistics();
    const scheduler = new DefaultScheduler(new InstancePool([instance]), stats, memory, gate);
    // 300 bytes needed, 100 free: it waits the 50 ms, then fails; the instance never saw it.
    const refused = scheduler.enqueue(request("big"), 1).catch((e: InferenceError) => e.message);
    expect(await refused).toBe("not enough free GPU memory on GPU 0 for the batch within --gpu-memory-wait-secs");
    expect(instance.started).toEqual([]);
    // Room found again while the next one waits: it runs.
    const next = scheduler.enqueue(request("next"), 1);
    await endOfTurn();
    expect(instance.started).toEqual([]);
    free = 1000;
    await gate.refresh();
    await endOfTurn();
    expect(instance.started).toEqual(["next"]);
    instance.finishNext();
    await next;
    // Two requests waited for room; the first was refused.
    expect(stats.memoryAdmission).toEqual({ delayed: 2, reduced: 0, refused: 1 });
    gate.close();
  });
});
