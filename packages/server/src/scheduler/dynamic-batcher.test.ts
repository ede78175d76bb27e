// The dynamic batcher under a clock the test controls, over instances whose executions the test
// completes: batch formation, delays, preferred sizes, shape boundaries, priorities, queue
// policies and ordering, without sleeping.
import { parseModelConfig } from "@galley/config";
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import type { Clock } from "../base/clock.js";
import type { InferenceError } from "../base/errors.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { createLogger } from "../base/log.js";
import { ModelStatistics } from "../base/statistics.js";
import {
  type BatchEvent,
  DynamicBatcher,
  PROBE_BACKOFF_STEPS,
  QUIET_PROBE_EVERY,
  WAIT_HISTORY,
} from "./dynamic-batcher.js";
import { InstancePool } from "./instance-pool.js";

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
  /** At once: these tests look at each arrival's decision (the end of a turn is tested with the real clock). */
  soon = (callback: () => void) => callback();
  /** Move time forward, firing due timers in order. */
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

/** An instance that records each batch and finishes it when the test says so. */
class HeldInstance implements BackendInstance {
  readonly batches: { ids: string[]; finish: () => void }[] = [];
  constructor(readonly name: string) {}
  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    return new Promise((resolve) => {
      this.batches.push({
        ids: requests.map((r) => r.id),
        finish: () =>
          resolve({
            responses: requests.map((r) => [
              { name: "OUT", datatype: "INT32", shape: [1], data: new Uint8Array(4), parameters: { id: r.id } },
            ]),
            computeInputNs: 1n,
            computeInferNs: 2n,
            computeOutputNs: 3n,
          }),
      });
    });
  }
}

function setup(scheduling: string, instances = 1, extraConfig = "", realClock = false) {
  const config = parseModelConfig(`name: "m" max_batch_size: 8
    input { name: "X" data_type: TYPE_FP32 dims: [ -1 ] }
    input { name: "R" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true optional: true }
    output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
    dynamic_batching { ${scheduling} } ${extraConfig}`);
  const clock = new ManualClock();
  const held = Array.from({ length: instances }, (_, i) => new HeldInstance(`m_${i}`));
  const stats = new ModelStatistics();
  const events: BatchEvent[] = [];
  const batcher = new DynamicBatcher({
    pool: new InstancePool(held),
    config,
    stats,
    log: createLogger({ info: false }),
    ...(realClock ? {} : { clock }),
    onBatch: (e) => events.push(e),
  });
  const settled: string[] = [];
  const send = (
    id: string,
    options: { width?: number; batch?: number; parameters?: Record<string, number>; ragged?: number } = {},
  ) => {
    const width = options.width ?? 4;
    const batch = options.batch ?? 1;
    const inputs = [
      {
        name: "X",
        datatype: "FP32" as const,
        shape: [batch, width],
        data: new Uint8Array(batch * width * 4),
        parameters: {},
      },
    ];
    if (options.ragged !== undefined) {
      inputs.push({
        name: "R",
        datatype: "FP32",
        shape: [batch, options.ragged],
        data: new Uint8Array(batch * options.ragged * 4),
        parameters: {},
      });
    }
    const request: InferenceRequest = {
      modelName: "m",
      modelVersion: "",
      id,
      parameters: options.parameters ?? {},
      inputs,
      outputs: [],
    };
    return batcher.enqueue(request, batch).then(
      () => {
        settled.push(id);
      },
      (error: InferenceError) => {
        settled.push(`${id}:${error.message}`);
        throw error;
      },
    );
  };
  return { batcher, clock, held, stats, events, send, settled };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe("DynamicBatcher", () => {
  it("with no delay, sends at once, and merges what queued while the instance was busy", async () => {
    const { held, send, events } = setup("");
    const first = send("a");
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a"]]);
    const rest = ["b", "c", "d", "e", "f"].map((id) => send(id));
    held[0]?.batches[0]?.finish();
    await first;
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a"], ["b", "c", "d", "e", "f"]]);
    held[0]?.batches[1]?.finish();
    await Promise.all(rest);
    expect(events.map((e) => [e.size, e.reason])).toEqual([
      [1, "no delay"],
      [5, "no delay"],
    ]);
  });

  it("waits up to max_queue_delay for a preferred size, then sends what it has", async () => {
    const { held, send, clock, events } = setup("preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000");
    const pending = [send("a"), send("b")];
    expect(held[0]?.batches).toHaveLength(0);
    clock.advanceUs(999);
    expect(held[0]?.batches).toHaveLength(0);
    clock.advanceUs(1);
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b"]]);
    expect(events.at(-1)).toEqual({ size: 2, requests: 2, reason: "delay expired" });
    held[0]?.batches[0]?.finish();
    await Promise.all(pending);
  });

  it("sends as soon as the largest preferred size is reached, without waiting", async () => {
    const { held, send, events } = setup("preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100000");
    const pending = ["a", "b", "c", "d"].map((id) => send(id));
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b", "c", "d"]]);
    expect(events[0]?.reason).toBe("preferred size reached");
    held[0]?.batches[0]?.finish();
    await Promise.all(pending);
  });

  it("after the delay, sends the largest preferred size a prefix reaches", async () => {
    const { held, send, clock } = setup("preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 500");
    const pending = ["a", "b", "c"].map((id) => send(id));
    clock.advanceUs(500);
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b"]]);
    held[0]?.batches[0]?.finish();
    await flush();
    clock.advanceUs(500);
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b"], ["c"]]);
    held[0]?.batches[1]?.finish();
    await Promise.all(pending);
  });

  it("fills batches up to max_batch_size, counting each request's batch dimension", async () => {
    const { held, send, stats } = setup("");
    const busy = send("busy");
    const pending = [
      send("a", { batch: 3 }),
      send("b", { batch: 4 }),
      send("c", { batch: 2 }),
      send("d", { batch: 1 }),
    ];
    held[0]?.batches[0]?.finish();
    await busy;
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["busy"], ["a", "b"]]);
    held[0]?.batches[1]?.finish();
    await flush();
    expect(held[0]?.batches[2]?.ids).toEqual(["c", "d"]);
    held[0]?.batches[2]?.finish();
    await Promise.all(pending);
    expect([...stats.batches.keys()].sort()).toEqual([1, 3, 7]);
    expect(stats.executionCount).toBe(3);
    expect(stats.inferenceCount).toBe(11);
  });

  it("merges only equal non-batch shapes, except for inputs that allow ragged batches", async () => {
    const { held, send, events } = setup("");
    const busy = send("busy");
    const pending = [
      send("a", { width: 4, ragged: 2 }),
      send("b", { width: 4, ragged: 5 }),
      send("c", { width: 8, ragged: 1 }),
    ];
    held[0]?.batches[0]?.finish();
    await busy;
    expect(held[0]?.batches[1]?.ids).toEqual(["a", "b"]);
    expect(events.at(-1)?.reason).toBe("shape boundary");
    held[0]?.batches[1]?.finish();
    await flush();
    expect(held[0]?.batches[2]?.ids).toEqual(["c"]);
    held[0]?.batches[2]?.finish();
    await Promise.all(pending);
  });

  it("serves higher priority levels first; priority 0 or out of range means the default level", async () => {
    const { held, send } = setup("priority_levels: 3 default_priority_level: 2 preferred_batch_size: [ 1 ]");
    const busy = send("busy");
    const pending = [
      send("low", { parameters: { priority: 3 } }),
      send("default", { parameters: { priority: 0 } }),
      send("high", { parameters: { priority: 1 } }),
      send("beyond", { parameters: { priority: 9 } }),
    ];
    for (let i = 0; i < 5; i++) {
      held[0]?.batches[i]?.finish();
      await flush();
    }
    await Promise.all([busy, ...pending]);
    expect(held[0]?.batches.map((b) => b.ids[0])).toEqual(["busy", "high", "default", "beyond", "low"]);
  });

  it("answers a full queue at once with Triton's message", async () => {
    const { held, send, stats } = setup("default_queue_policy { max_queue_size: 2 }");
    const busy = send("busy");
    const queued = [send("a"), send("b")];
    await expect(send("c")).rejects.toThrow("Exceeds maximum queue size");
    // The core counts it (request-pipeline.ts), once.
    expect(stats.failures.REJECTED).toBe(0);
    held[0]?.batches[0]?.finish();
    await busy;
    held[0]?.batches[1]?.finish();
    await Promise.all(queued);
  });

  it("rejects requests whose queue timeout expires (REJECT), and a request may only lower the timeout", async () => {
    const { held, send, clock } = setup(
      "default_queue_policy { default_timeout_microseconds: 1000 allow_timeout_override: true timeout_action: REJECT }",
    );
    const busy = send("busy");
    const a = send("a");
    const b = send("b", { parameters: { timeout: 200 } });
    const c = send("c", { parameters: { timeout: 5000 } });
    clock.advanceUs(200);
    await expect(b).rejects.toThrow("Request timeout expired");
    clock.advanceUs(800);
    await expect(a).rejects.toThrow("Request timeout expired");
    await expect(c).rejects.toThrow("Request timeout expired");
    held[0]?.batches[0]?.finish();
    await busy;
  });

  it("moves expired requests behind the others under DELAY instead of rejecting them", async () => {
    const { held, send, clock } = setup(
      "default_queue_policy { default_timeout_microseconds: 100 timeout_action: DELAY } preferred_batch_size: [ 1 ]",
    );
    const busy = send("busy");
    const early = send("early");
    clock.advanceUs(100);
    const late = send("late");
    held[0]?.batches[0]?.finish();
    await busy;
    expect(held[0]?.batches[1]?.ids).toEqual(["late"]);
    held[0]?.batches[1]?.finish();
    await flush();
    expect(held[0]?.batches[2]?.ids).toEqual(["early"]);
    held[0]?.batches[2]?.finish();
    await Promise.all([early, late]);
  });

  it("with preserve_ordering, answers in arrival order even when a later batch finishes first", async () => {
    const { held, send, settled } = setup("preserve_ordering: true preferred_batch_size: [ 1 ]", 2);
    const pending = [send("a"), send("b")];
    expect(held[0]?.batches[0]?.ids).toEqual(["a"]);
    expect(held[1]?.batches[0]?.ids).toEqual(["b"]);
    held[1]?.batches[0]?.finish();
    await flush();
    expect(settled).toEqual([]);
    held[0]?.batches[0]?.finish();
    await Promise.all(pending);
    expect(settled).toEqual(["a", "b"]);
  });

  it("drops a request cancelled while it waits, and on drain sends what waits without the delay", async () => {
    const { held, send, batcher } = setup("max_queue_delay_microseconds: 100000 preferred_batch_size: [ 8 ]");
    const controller = new AbortController();
    const request: InferenceRequest = {
      modelName: "m",
      modelVersion: "",
      id: "x",
      parameters: {},
      inputs: [{ name: "X", datatype: "FP32", shape: [1, 4], data: new Uint8Array(16), parameters: {} }],
      outputs: [],
      signal: controller.signal,
    };
    const cancelled = batcher.enqueue(request, 1);
    const kept = send("kept");
    controller.abort();
    await expect(cancelled).rejects.toThrow("request cancelled");
    expect(held[0]?.batches).toHaveLength(0);
    let drained = false;
    const draining = batcher.drain().then(() => {
      drained = true;
    });
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["kept"]]);
    await flush();
    expect(drained).toBe(false);
    held[0]?.batches[0]?.finish();
    await Promise.all([kept, draining]);
    expect(drained).toBe(true);
  });

  it("stops waiting out the delay when waits gain nothing (one client at a time), and resumes once requests meet", async () => {
    const { held, send, clock, events } = setup("preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 500");
    const batches = () => held[0]?.batches ?? [];
    // One request at a time: each waits the whole delay and nobody joins it.
    for (let i = 0; i < WAIT_HISTORY; i++) {
      const pending = send(`w${i}`);
      expect(batches()).toHaveLength(i);
      clock.advanceUs(500);
      batches()[i]?.finish();
      await pending;
    }
    expect(events.every((e) => e.reason === "delay expired")).toBe(true);
    // Now requests go at once, except one wait in every WAIT_HISTORY.
    const reasons: string[] = [];
    for (let i = 0; i < WAIT_HISTORY - 1; i++) {
      const pending = send(`s${i}`);
      expect(batches()).toHaveLength(WAIT_HISTORY + i + 1);
      reasons.push(events.at(-1)?.reason ?? "");
      batches().at(-1)?.finish();
      await pending;
    }
    expect(new Set(reasons)).toEqual(new Set(["waiting has not paid off"]));
    // The probe waits, and this time a second request joins it: waiting is back.
    const probe = [send("p0")];
    const before = batches().length;
    expect(batches()).toHaveLength(before);
    probe.push(send("p1"));
    clock.advanceUs(500);
    expect(batches().at(-1)?.ids).toEqual(["p0", "p1"]);
    batches().at(-1)?.finish();
    await Promise.all(probe);
    const next = send("n0");
    expect(batches()).toHaveLength(before + 1);
    clock.advanceUs(500);
    expect(batches().at(-1)?.ids).toEqual(["n0"]);
    expect(events.at(-1)?.reason).toBe("delay expired");
    batches().at(-1)?.finish();
    await next;
  });

  it("tries a wait less and less often while tries gain nothing (a lone client pays the delay rarely)", async () => {
    const { held, send, clock, events } = setup("max_queue_delay_microseconds: 500");
    const batches = () => held[0]?.batches ?? [];
    const one = async (id: string) => {
      const pending = send(id);
      if (batches().at(-1)?.ids[0] !== id) clock.advanceUs(500); // a wait: nobody joins it
      batches().at(-1)?.finish();
      await pending;
    };
    for (let i = 0; i < WAIT_HISTORY; i++) await one(`w${i}`);
    // Count the sends between the waits that are still tried: 8, then 16, 32, ... up to 8 × 2^5.
    const gaps: number[] = [];
    let run = 0;
    for (let i = 0; i < 2000 && gaps.length < PROBE_BACKOFF_STEPS + 3; i++) {
      await one(`s${i}`);
      if (events.at(-1)?.reason === "waiting has not paid off") run++;
      else {
        gaps.push(run);
        run = 0;
      }
    }
    expect(gaps).toEqual([7, 15, 31, 63, 127, 255, 255, 255]);
  });

  it("stops waiting once a burst of arrivals is over, except on the waits that probe the whole delay", async () => {
    // Users in lockstep: three requests 50 µs apart each round, and a fourth user who is elsewhere.
    const { held, send, clock, events } = setup("max_queue_delay_microseconds: 6000");
    const batches = () => held[0]?.batches ?? [];
    const round = async (r: number) => {
      const pending = [send(`r${r}a`)];
      clock.advanceUs(50);
      pending.push(send(`r${r}b`));
      clock.advanceUs(50);
      pending.push(send(`r${r}c`));
      const start = events.length;
      let waitedUs = 0;
      while (events.length === start && waitedUs < 6000) {
        clock.advanceUs(50);
        waitedUs += 50;
      }
      expect(batches().at(-1)?.ids).toEqual([`r${r}a`, `r${r}b`, `r${r}c`]);
      batches().at(-1)?.finish();
      await Promise.all(pending);
      return { waitedUs, reason: events.at(-1)?.reason };
    };
    const rounds = [];
    for (let r = 0; r < QUIET_PROBE_EVERY + 2; r++) rounds.push(await round(r));
    // Four rounds learn the gaps (two joins each) waiting the whole delay; then each burst goes
    // 100 µs after its last arrival (twice the 50 µs gap), but for the next probe of the delay.
    // Three rounds wait the whole delay while the gaps are learnt (two joins a round; from the
    // eighth, during the fourth round, the rule applies); then each burst goes 100 µs after its
    // last arrival (twice the 50 µs gap), except on the next wait that probes the whole delay.
    expect(rounds.slice(0, 3).map((x) => x.reason)).toEqual(Array(3).fill("delay expired"));
    expect(rounds[3]).toEqual({ waitedUs: 100, reason: "arrivals stopped" });
    expect(rounds[QUIET_PROBE_EVERY]?.reason).toBe("delay expired");
    expect(rounds.filter((x) => x.reason === "arrivals stopped")).toHaveLength(QUIET_PROBE_EVERY + 2 - 3 - 1);
  });

  it("with adaptive_queue_delay false, waits out the delay every time, as Triton does", async () => {
    const { held, send, clock, events } = setup(
      "max_queue_delay_microseconds: 500",
      1,
      'parameters { key: "adaptive_queue_delay" value { string_value: "FALSE" } }',
    );
    for (let i = 0; i < 3 * WAIT_HISTORY; i++) {
      const pending = send(`w${i}`);
      expect(held[0]?.batches).toHaveLength(i);
      clock.advanceUs(500);
      held[0]?.batches[i]?.finish();
      await pending;
    }
    expect(new Set(events.map((e) => e.reason))).toEqual(new Set(["delay expired"]));
  });

  it("on the real clock, batches requests that arrive in one event-loop turn, with no delay and an idle instance", async () => {
    const { held, send, events } = setup("", 1, "", true);
    const turn = ["a", "b", "c"].map((id) => send(id));
    expect(held[0]?.batches).toHaveLength(0);
    await flush();
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b", "c"]]);
    expect(events.map((e) => e.reason)).toEqual(["no delay"]);
    held[0]?.batches[0]?.finish();
    await Promise.all(turn);
    // The next turn's lone request goes alone, at the end of its turn.
    const next = send("d");
    await flush();
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b", "c"], ["d"]]);
    held[0]?.batches[1]?.finish();
    await next;
  });

  it("refuses an adaptive_queue_delay that is not true or false", () => {
    expect(() =>
      setup(
        "max_queue_delay_microseconds: 500",
        1,
        'parameters { key: "adaptive_queue_delay" value { string_value: "yes" } }',
      ),
    ).toThrow("parameter 'adaptive_queue_delay' of model 'm' must be true or false, got 'yes'");
  });
});
