// The sequence batcher's iterative sequences (`iterative_sequence: true`) over an instance whose
// executions the test completes, rescheduling the requests it names: ids and START given, the
// request run again as it came, cancellation and drain in the middle of the loop.
import { parseModelConfig } from "@galley/config";
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../../backend/backend.js";
import type { Clock } from "../../base/clock.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import { createLogger } from "../../base/log.js";
import { ModelStatistics } from "../../base/statistics.js";
import { InstancePool } from "../instance-pool.js";
import { SequenceBatcher } from "./sequence-batcher.js";

/** Time the test moves, firing the timers due. */
class ManualClock implements Clock {
  ns = 0n;
  #timers: { at: bigint; callback: () => void; id: number }[] = [];
  #next = 1;
  now = () => this.ns;
  setTimer = (callback: () => void, delayMs: number) => {
    const id = this.#next++;
    this.#timers.push({ at: this.ns + BigInt(Math.round(delayMs * 1e6)), callback, id });
    return id;
  };
  clearTimer = (id: unknown) => {
    this.#timers = this.#timers.filter((t) => t.id !== id);
  };
  soon = (callback: () => void) => callback();
  advanceUs(us: number): void {
    this.ns += BigInt(us) * 1000n;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= this.ns).sort((a, b) => (a.at < b.at ? -1 : 1))[0];
      if (!due) return;
      this.clearTimer(due.id);
      due.callback();
    }
  }
}

interface Batch {
  requests: readonly InferenceRequest[];
  /** Finish the batch: the requests at `reschedule` (indexes) are released with RESCHEDULE. */
  finish(reschedule?: number[]): void;
}

class HeldInstance implements BackendInstance {
  readonly name = "m_0";
  readonly batches: Batch[] = [];
  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    return new Promise((resolve) => {
      this.batches.push({
        requests,
        finish: (reschedule = []) =>
          resolve({
            responses: requests.map((r, i) =>
              reschedule.includes(i)
                ? []
                : [{ name: "OUT", datatype: "INT32", shape: [1], data: new Uint8Array(4), parameters: { id: r.id } }],
            ),
            ...(reschedule.length > 0 ? { rescheduled: reschedule } : {}),
            computeInputNs: 0n,
            computeInferNs: 0n,
            computeOutputNs: 0n,
          }),
      });
    });
  }
}

/** One instance; max_batch_size 0 (one slot) unless `batching` says otherwise. */
function setup(iterative = true, batching = "", maxBatchSize = 0) {
  const dims = maxBatchSize > 0 ? [1, 1] : [1];
  const config = parseModelConfig(`name: "m" max_batch_size: ${maxBatchSize}
    input { name: "X" data_type: TYPE_INT32 dims: [ 1 ] }
    output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
    sequence_batching { iterative_sequence: ${iterative} ${batching} }`);
  const clock = new ManualClock();
  const instance = new HeldInstance();
  const stats = new ModelStatistics();
  const batcher = new SequenceBatcher({
    pool: new InstancePool([instance], undefined, false),
    config,
    stats,
    log: createLogger({ info: false }),
    clock,
  });
  const settled: string[] = [];
  const send = (id: string, parameters: InferenceRequest["parameters"] = {}, signal?: AbortSignal) => {
    const request: InferenceRequest = {
      modelName: "m",
      modelVersion: "",
      id,
      parameters,
      inputs: [{ name: "X", datatype: "INT32", shape: dims, data: new Uint8Array(4), parameters: {} }],
      outputs: [],
      ...(signal ? { signal } : {}),
    };
    const result = batcher.enqueue(request, 1).then(
      (r) => {
        settled.push(id);
        return r;
      },
      (error: Error) => {
        settled.push(`${id}: ${error.message}`);
      },
    );
    return { request, result };
  };
  /** The batches so far: each request's id, correlation id and flags as the model sees them. */
  const seen = () =>
    instance.batches.map((b) =>
      b.requests.map(
        (r) =>
          `${r.id}:${String(r.parameters.sequence_id)}:${r.parameters.sequence_start ? "S" : ""}${r.parameters.sequence_end ? "E" : ""}`,
      ),
    );
  return { batcher, clock, instance, stats, send, settled, seen };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe("SequenceBatcher, iterative", () => {
  it("gives a request without an id one of its own and START, and runs it again, as it came, while the model reschedules it", async () => {
    const { instance, send, settled, seen, stats, clock } = setup();
    const a = send("a");
    expect(seen()).toEqual([["a:1:S"]]);
    clock.ns = 10n;
    instance.batches[0]?.finish([0]);
    await flush();
    // Again, with neither START nor END, and the same inputs.
    expect(seen()).toEqual([["a:1:S"], ["a:1:"]]);
    expect(instance.batches[1]?.requests[0]?.inputs[0]).toBe(instance.batches[0]?.requests[0]?.inputs[0]);
    // One object for every execution of the request, for the backend to keep its things on.
    expect(instance.batches[1]?.requests[0]?.iteration).toBeDefined();
    expect(instance.batches[1]?.requests[0]?.iteration).toBe(instance.batches[0]?.requests[0]?.iteration);
    expect(settled).toEqual([]);
    expect(stats.pending).toBe(0);
    clock.ns = 25n;
    instance.batches[1]?.finish();
    const result = await a.result;
    expect(settled).toEqual(["a"]);
    expect(result?.outputs.map((o) => o.parameters.id)).toEqual(["a"]);
    expect(stats.executionCount).toBe(2);
    // The next request is a sequence of its own: the first one's (its only slot) has ended.
    send("b");
    expect(seen().at(-1)).toEqual(["b:2:S"]);
  });

  it("keeps a waiting request in the backlog until the looping one is released", async () => {
    const { instance, send, settled, seen } = setup();
    send("a");
    send("b");
    expect(seen()).toEqual([["a:1:S"]]);
    instance.batches[0]?.finish([0]);
    await flush();
    instance.batches[1]?.finish([0]);
    await flush();
    expect(seen()).toEqual([["a:1:S"], ["a:1:"], ["a:1:"]]);
    instance.batches[2]?.finish();
    await flush();
    expect(settled).toEqual(["a"]);
    expect(seen().at(-1)).toEqual(["b:2:S"]);
  });

  it("a client's own id needs START; a release without RESCHEDULE ends the sequence", async () => {
    const { instance, send, settled } = setup();
    send("a", { sequence_id: 7n, sequence_start: true });
    instance.batches[0]?.finish();
    await flush();
    await send("b", { sequence_id: 7n }).result;
    expect(settled).toEqual([
      "a",
      "b: inference request for sequence 7 to model 'm' must specify the START flag on the first request of the sequence",
    ]);
  });

  it("cancels a request whose client went while it executed, instead of running it again; its slot frees", async () => {
    const { instance, send, settled, seen, stats } = setup();
    const abort = new AbortController();
    send("a", {}, abort.signal);
    send("b");
    abort.abort();
    instance.batches[0]?.finish([0]);
    await flush();
    expect(settled).toEqual(["a: [request id: a] request cancelled"]);
    expect(seen()).toEqual([["a:1:S"], ["b:2:S"]]);
    expect(stats.pending).toBe(0);
  });

  it("cancels a rescheduled request waiting for its turn; its slot frees", async () => {
    // Two slots, and a batch waits up to 1 s for both to have a request.
    const { instance, send, settled, seen, clock, stats } = setup(
      true,
      "direct { max_queue_delay_microseconds: 1000000 minimum_slot_utilization: 1.0 }",
      2,
    );
    const abort = new AbortController();
    send("a", {}, abort.signal);
    clock.advanceUs(1_000_000);
    expect(seen()).toEqual([["a:1:S"]]);
    instance.batches[0]?.finish([0]);
    await flush();
    // Back in the queue, waiting for the delay.
    expect(seen()).toEqual([["a:1:S"]]);
    expect(stats.pending).toBe(1);
    abort.abort();
    expect(settled).toEqual([]);
    await flush();
    expect(settled).toEqual(["a: [request id: a] request cancelled"]);
    expect(stats.pending).toBe(0);
    send("b");
    send("c");
    // Both slots are free: b and c fill the batch, which goes at once.
    expect(seen().at(-1)).toEqual(["b:2:S", "c:3:S"]);
  });

  it("a drain waits for a rescheduled request's loop to end", async () => {
    const { batcher, instance, send, settled } = setup();
    send("a");
    let drained = false;
    void batcher.drain().then(() => {
      drained = true;
    });
    for (let i = 0; i < 3; i++) {
      instance.batches[i]?.finish([0]);
      await flush();
      expect(drained).toBe(false);
    }
    instance.batches[3]?.finish();
    await flush();
    expect(settled).toEqual(["a"]);
    expect(drained).toBe(true);
  });
});

describe("SequenceBatcher, not iterative", () => {
  it("refuses a request without an id, and fails one its model reschedules with Triton's text", async () => {
    const { instance, send, settled } = setup(false);
    await send("a").result;
    send("b", { sequence_id: 3n, sequence_start: true });
    instance.batches[0]?.finish([0]);
    await flush();
    expect(settled).toEqual([
      "a: inference request to model 'm' must specify a non-zero or non-empty correlation ID",
      "b: Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.",
    ]);
  });
});
