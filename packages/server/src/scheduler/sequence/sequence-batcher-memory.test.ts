// The sequence batcher under GPU-memory admission (both strategies): a GPU table the test writes, a
// clock it moves and one instance "on GPU 0" whose batches it finishes, reporting their working memory.
import { parseModelConfig } from "@galley/config";
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../../backend/backend.js";
import type { Clock } from "../../base/clock.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../../base/device-memory.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import { createLogger } from "../../base/log.js";
import { ModelStatistics } from "../../base/statistics.js";
import { BatchMemory } from "../batch-memory.js";
import { GpuMemoryAdmission } from "../gpu-memory-admission.js";
import { InstancePool } from "../instance-pool.js";
import { SequenceBatcher } from "./sequence-batcher.js";

const MIB = 2 ** 20;
const WAIT_MS = 1000;

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
  advanceMs(ms: number): void {
    this.ns += BigInt(ms) * 1_000_000n;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= this.ns).sort((a, b) => (a.at < b.at ? -1 : 1))[0];
      if (!due) return;
      this.clearTimer(due.id);
      due.callback();
    }
  }
}

/** The instance on GPU 0: each batch waits for the test, then reports `peak` bytes a request (null ones too). */
class GpuInstance implements BackendInstance {
  readonly name = "m_0";
  readonly device = 0;
  readonly batches: { requests: readonly InferenceRequest[]; finish: (peakPerRequest: number) => void }[] = [];
  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    return new Promise((resolve) => {
      this.batches.push({
        requests,
        finish: (peak) =>
          resolve({
            responses: requests.map(() => [
              { name: "OUT", datatype: "INT32", shape: [1, 1], data: new Uint8Array(4), parameters: {} },
            ]),
            computeInputNs: 0n,
            computeInferNs: 0n,
            computeOutputNs: 0n,
            peakWorkingBytes: peak * requests.length,
          }),
      });
    });
  }
  /** Each batch's requests by id ("" for a null request). */
  get ids(): string[][] {
    return this.batches.map((b) => b.requests.map((r) => r.id));
  }
}

class TableReader implements DeviceMemoryReader {
  freeMib = 0;
  async read(): Promise<ReadonlyMap<number, DeviceMemoryReading>> {
    return new Map([[0, { freeBytes: this.freeMib * MIB, usedBytes: 0, totalBytes: 80_000 * MIB }]]);
  }
  async releaseCache(): Promise<void> {}
}

async function setup(strategy: string, freeMib: number) {
  const config = parseModelConfig(`name: "m" max_batch_size: 4
    input { name: "X" data_type: TYPE_INT32 dims: [ 1 ] }
    output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
    sequence_batching { max_sequence_idle_microseconds: 60000000 ${strategy} }`);
  const clock = new ManualClock();
  const reader = new TableReader();
  reader.freeMib = freeMib;
  const log = createLogger({ write: () => {} });
  const gate = new GpuMemoryAdmission({ reader, reserveBytes: 0, waitMs: WAIT_MS, log, clock });
  await gate.refresh();
  const memory = new BatchMemory();
  const instance = new GpuInstance();
  const stats = new ModelStatistics();
  const batcher = new SequenceBatcher({
    pool: new InstancePool([instance], undefined, false),
    config,
    stats,
    log,
    clock,
    memory,
    admission: gate,
  });
  const settled: string[] = [];
  const send = (id: string, sequence: number, flags: { start?: boolean; end?: boolean } = {}) =>
    batcher
      .enqueue(
        {
          modelName: "m",
          modelVersion: "",
          id,
          parameters: {
            sequence_id: sequence,
            ...(flags.start ? { sequence_start: true } : {}),
            ...(flags.end ? { sequence_end: true } : {}),
          },
          inputs: [{ name: "X", datatype: "INT32", shape: [1, 1], data: new Uint8Array(4), parameters: {} }],
          outputs: [],
        },
        1,
      )
      .then(
        () => void settled.push(id),
        (error: Error) => void settled.push(`${id}: ${error.message}`),
      );
  /** Read the GPU again at `freeMib` (the admission then tells the batcher). */
  const room = async (mib: number) => {
    reader.freeMib = mib;
    await gate.refresh();
  };
  return { clock, gate, memory, instance, stats, send, settled, room, batcher };
}

const SHORT = "not enough free GPU memory on GPU 0 for the batch within --gpu-memory-wait-secs";

describe("SequenceBatcher with GPU-memory admission", () => {
  it("oldest: sends the largest prefix that fits, holds the rest until a batch ends, and learns each batch's peak", async () => {
    const { clock, instance, memory, stats, send, settled, room, gate } = await setup(
      "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 1000 }",
      700,
    );
    memory.record(1, 300 * MIB);
    const answers = [send("a", 1, { start: true }), send("b", 2, { start: true }), send("c", 3, { start: true })];
    clock.advanceMs(1);
    // 700 MiB: two sequences' requests (600 MiB) go; the third waits in its place.
    expect(instance.ids).toEqual([["a", "b"]]);
    expect(stats.memoryAdmission).toEqual({ delayed: 0, reduced: 1, refused: 0 });
    instance.batches[0]?.finish(250 * MIB);
    await Promise.all(answers.slice(0, 2));
    await room(700);
    expect(instance.ids).toEqual([["a", "b"], ["c"]]);
    instance.batches[1]?.finish(250 * MIB);
    await Promise.all(answers);
    expect(settled).toEqual(["a", "b", "c"]);
    expect(memory.peaks).toEqual(
      new Map([
        [1, 300 * MIB],
        [2, 500 * MIB],
      ]),
    );
    gate.close();
  });

  it("direct: a batch's size counts the null requests below its highest position", async () => {
    const { clock, instance, memory, send, room, gate } = await setup(
      "direct { max_queue_delay_microseconds: 1000 minimum_slot_utilization: 1.0 }",
      10_000,
    );
    memory.record(1, 100 * MIB);
    // Three sequences take positions 0, 1 and 2; their STARTs run together.
    const starts = [send("a1", 1, { start: true }), send("b1", 2, { start: true }), send("c1", 3, { start: true })];
    clock.advanceMs(1);
    expect(instance.ids).toEqual([["a1", "b1", "c1"]]);
    instance.batches[0]?.finish(100 * MIB);
    await Promise.all(starts);
    // Room for 250 MiB: c's request alone is a batch of 3 (two null requests), 300 MiB: it waits.
    await room(250);
    const c2 = send("c2", 3);
    clock.advanceMs(1);
    expect(instance.ids).toHaveLength(1);
    await room(300);
    expect(instance.ids.at(-1)).toEqual(["", "", "c2"]);
    instance.batches[1]?.finish(100 * MIB);
    await c2;
    // Positions 0 and 1 only (200 MiB) fit in 250 MiB: a and b go, c waits for a batch of 3.
    await room(250);
    const next = [send("a2", 1), send("b2", 2), send("c3", 3)];
    clock.advanceMs(1);
    expect(instance.ids.at(-1)).toEqual(["a2", "b2"]);
    instance.batches[2]?.finish(100 * MIB);
    await Promise.all(next.slice(0, 2));
    await room(300);
    expect(instance.ids.at(-1)).toEqual(["", "", "c3"]);
    instance.batches[3]?.finish(100 * MIB);
    await Promise.all(next);
    gate.close();
  });

  it("a request that waits --gpu-memory-wait-secs gets UNAVAILABLE; its sequence stays open, a neighbour waits its own time", async () => {
    const { clock, instance, memory, stats, send, settled, room, gate } = await setup(
      "oldest { max_candidate_sequences: 4 }",
      1000,
    );
    memory.record(1, 400 * MIB);
    const a1 = send("a1", 1, { start: true });
    instance.batches[0]?.finish(400 * MIB);
    await a1;
    await room(100);
    const a2 = send("a2", 1);
    clock.advanceMs(500);
    const b1 = send("b1", 2, { start: true });
    clock.advanceMs(499);
    expect(settled).toEqual(["a1"]);
    clock.advanceMs(1);
    await a2;
    // a2 waited its 1000 ms; b1, 500 ms later, still waits.
    expect(settled).toEqual(["a1", `a2: ${SHORT}`]);
    expect(stats.pending).toBe(1);
    // Sequence 1 is still open: its next request needs no START, and runs once there is room.
    await room(1000);
    expect(instance.ids.at(-1)).toEqual(["b1"]);
    instance.batches.at(-1)?.finish(400 * MIB);
    await b1;
    const a3 = send("a3", 1, { end: true });
    expect(instance.ids.at(-1)).toEqual(["a3"]);
    instance.batches.at(-1)?.finish(400 * MIB);
    await a3;
    expect(settled).toEqual(["a1", `a2: ${SHORT}`, "b1", "a3"]);
    expect(stats.memoryAdmission).toEqual({ delayed: 2, reduced: 0, refused: 1 });
    gate.close();
  });

  it("a refused START ends the sequence it would have begun, with the requests queued behind it", async () => {
    const { clock, instance, memory, send, settled, room, gate } = await setup(
      "oldest { max_candidate_sequences: 4 }",
      100,
    );
    memory.record(1, 400 * MIB);
    const waiting = [send("s1", 7, { start: true }), send("s2", 7)];
    clock.advanceMs(WAIT_MS);
    await Promise.all(waiting);
    expect(settled).toEqual([`s1: ${SHORT}`, `s2: ${SHORT}`]);
    await room(1000);
    // The sequence never began: a request without START is refused as for an unknown sequence.
    await send("s3", 7);
    expect(settled.at(-1)).toMatch(/^s3: .*must specify the START flag/);
    expect(instance.ids).toEqual([]);
    gate.close();
  });

  it("drains: a batch waiting for memory still goes once there is room, and the batcher stops listening", async () => {
    const { instance, memory, send, room, batcher, gate } = await setup("oldest { max_candidate_sequences: 4 }", 100);
    memory.record(1, 400 * MIB);
    const answer = send("x", 1, { start: true, end: true });
    const drained = batcher.drain();
    await room(1000);
    expect(instance.ids).toEqual([["x"]]);
    instance.batches[0]?.finish(1);
    await answer;
    await drained;
    // Unsubscribed: a reading after the drain starts nothing.
    await room(1000);
    expect(instance.ids).toEqual([["x"]]);
    gate.close();
  });
});
