// The default scheduler's turn: requests start at the end of the event-loop turn they arrived in,
// one at a time per instance, in arrival order; one cancelled before then never runs.
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import type { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { ModelStatistics } from "../base/statistics.js";
import { DefaultScheduler } from "./default-scheduler.js";
import { InstancePool } from "./instance-pool.js";

/** An instance that records each request it starts and finishes it when the test says so. */
class HeldInstance implements BackendInstance {
  readonly name = "m_0";
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
});
