// The dynamic batcher under GPU-memory admission: a GPU table the test writes, a clock it moves and
// instances "on GPU 0" whose batches it finishes, reporting their working memory.
import { parseModelConfig } from "@galley/config";
import { describe, expect, it } from "vitest";
import type { BackendInstance, ExecuteResult } from "../backend/backend.js";
import type { Clock } from "../base/clock.js";
import type { DeviceMemoryReader, DeviceMemoryReading } from "../base/device-memory.js";
import type { InferenceRequest } from "../base/inference-request.js";
import { createLogger } from "../base/log.js";
import { ModelStatistics } from "../base/statistics.js";
import { BatchMemory } from "./batch-memory.js";
import { DynamicBatcher } from "./dynamic-batcher.js";
import { GpuMemoryAdmission } from "./gpu-memory-admission.js";
import { InstancePool } from "./instance-pool.js";

const MIB = 2 ** 20;

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
  #soon: (() => void)[] = [];
  /** At the end of the "turn": {@link turn} runs them, so requests sent together batch together. */
  soon = (callback: () => void) => {
    this.#soon.push(callback);
  };
  turn(): void {
    for (const callback of this.#soon.splice(0)) callback();
  }
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

/** An instance on GPU 0 whose batches the test finishes, each reporting `peak` bytes a sample. */
class GpuInstance implements BackendInstance {
  readonly device = 0;
  readonly batches: { ids: string[]; finish: (peakPerSample: number) => void }[] = [];
  constructor(readonly name: string) {}
  execute(requests: readonly InferenceRequest[]): Promise<ExecuteResult> {
    return new Promise((resolve) => {
      this.batches.push({
        ids: requests.map((r) => r.id),
        finish: (peak) =>
          resolve({
            responses: requests.map(() => [
              { name: "OUT", datatype: "INT32", shape: [1], data: new Uint8Array(4), parameters: {} },
            ]),
            computeInputNs: 1n,
            computeInferNs: 2n,
            computeOutputNs: 3n,
            peakWorkingBytes: peak * requests.length,
          }),
      });
    });
  }
}

class TableReader implements DeviceMemoryReader {
  freeMib = 0;
  async read(): Promise<ReadonlyMap<number, DeviceMemoryReading>> {
    return new Map([[0, { freeBytes: this.freeMib * MIB, usedBytes: 0, totalBytes: 80_000 * MIB }]]);
  }
  async releaseCache(): Promise<void> {}
}

async function setup(freeMib: number, instances = 2, admitting = true) {
  const config = parseModelConfig(`name: "m" max_batch_size: 8
    input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }
    output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
    dynamic_batching { }`);
  const clock = new ManualClock();
  const reader = new TableReader();
  reader.freeMib = freeMib;
  const log = createLogger({ write: () => {} });
  const gate = new GpuMemoryAdmission({ reader, reserveBytes: 0, waitMs: 1000, log, clock });
  await gate.refresh();
  const memory = new BatchMemory();
  const held = Array.from({ length: instances }, (_, i) => new GpuInstance(`m_${i}`));
  const stats = new ModelStatistics();
  const batcher = new DynamicBatcher({
    pool: new InstancePool(held),
    config,
    stats,
    log,
    clock,
    memory,
    ...(admitting ? { admission: gate } : {}),
  });
  const settled: string[] = [];
  const send = (id: string) =>
    batcher
      .enqueue(
        {
          modelName: "m",
          modelVersion: "",
          id,
          parameters: {},
          inputs: [{ name: "X", datatype: "FP32", shape: [1, 4], data: new Uint8Array(16), parameters: {} }],
          outputs: [],
        },
        1,
      )
      .then(
        () => void settled.push(id),
        (error: Error) => void settled.push(`${id}: ${error.message}`),
      );
  return { clock, reader, gate, memory, held, send, settled, stats };
}

describe("DynamicBatcher with GPU-memory admission", () => {
  it("sends the largest batch that fits, holds the rest until a batch ends, and learns from each batch's peak", async () => {
    const { clock, gate, memory, held, send, settled, stats } = await setup(1000);
    memory.record(1, 300 * MIB);
    const answers = ["a", "b", "c", "d"].map(send);
    clock.turn();
    // 1000 MiB free: three samples of 300 MiB go; the fourth would not fit beside them.
    expect(held.map((h) => h.batches.map((b) => b.ids))).toEqual([[["a", "b", "c"]], []]);
    held[0]?.batches[0]?.finish(250 * MIB);
    await answers[0];
    await gate.refresh();
    clock.turn();
    expect(held[1]?.batches.map((b) => b.ids)).toEqual([["d"]]);
    held[1]?.batches[0]?.finish(250 * MIB);
    await Promise.all(answers);
    expect(settled).toEqual(["a", "b", "c", "d"]);
    // One batch sent smaller than gathered, one that waited for room (d).
    expect(stats.memoryAdmission).toEqual({ delayed: 1, reduced: 1, refused: 0 });
    expect(memory.peaks).toEqual(
      new Map([
        [1, 300 * MIB],
        [3, 750 * MIB],
      ]),
    );
  });

  it("a batch that never fits waits --gpu-memory-wait-secs, then its requests get UNAVAILABLE; the instance stays usable", async () => {
    const { clock, reader, gate, memory, held, send, settled, stats } = await setup(100);
    memory.record(1, 400 * MIB);
    const waiting = send("big");
    clock.turn();
    clock.advanceMs(999);
    expect(settled).toEqual([]);
    clock.advanceMs(1);
    await waiting;
    expect(settled).toEqual(["big: not enough free GPU memory on GPU 0 for the batch within --gpu-memory-wait-secs"]);
    expect(stats.memoryAdmission).toEqual({ delayed: 1, reduced: 0, refused: 1 });
    // Room comes back: the next request runs.
    reader.freeMib = 1000;
    await gate.refresh();
    const next = send("next");
    clock.turn();
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["next"]]);
    held[0]?.batches[0]?.finish(1);
    await next;
    expect(settled.at(-1)).toBe("next");
    gate.close();
  });

  it("room found while waiting lets the batch go (the GPU is read again)", async () => {
    const { clock, reader, gate, memory, held, send } = await setup(100);
    memory.record(1, 400 * MIB);
    const waiting = send("later");
    clock.turn();
    expect(held[0]?.batches).toEqual([]);
    reader.freeMib = 500;
    await gate.refresh();
    clock.turn();
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["later"]]);
    held[0]?.batches[0]?.finish(1);
    await waiting;
    gate.close();
  });

  it("without admission, batches run as they come and each one's working memory is still recorded", async () => {
    const { clock, memory, held, send } = await setup(0, 1, false);
    const answers = ["a", "b"].map(send);
    clock.turn();
    expect(held[0]?.batches.map((b) => b.ids)).toEqual([["a", "b"]]);
    held[0]?.batches[0]?.finish(10 * MIB);
    await Promise.all(answers);
    expect(memory.peaks).toEqual(new Map([[2, 20 * MIB]]));
  });
});
