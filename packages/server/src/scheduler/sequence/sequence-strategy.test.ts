import { create } from "@bufbuild/protobuf";
import { type ModelConfig, ModelConfigSchema, type ModelSequenceBatching } from "@galley/proto";
import { describe, expect, it } from "vitest";
import type { InferenceRequest } from "../../base/inference-request.js";
import type { Sequence } from "./sequence.js";
import { sequenceStrategy } from "./sequence-batcher.js";

function config(strategy: ModelSequenceBatching["strategyChoice"], maxBatchSize = 4): ModelConfig {
  return create(ModelConfigSchema, {
    name: "m",
    maxBatchSize,
    schedulingChoice: { case: "sequenceBatching", value: { strategyChoice: strategy } },
  });
}

function strategyOf(c: ModelConfig) {
  if (c.schedulingChoice.case !== "sequenceBatching") throw new Error("not sequence batching");
  return sequenceStrategy(c, c.schedulingChoice.value);
}

const sequence = (position: number, enqueuedNs: bigint) =>
  ({ id: BigInt(position + 1), position, queue: [{ enqueuedNs }] }) as unknown as Sequence;

const request = (id: string): InferenceRequest =>
  ({ modelName: "m", modelVersion: "", id, parameters: {}, inputs: [], outputs: [] }) as InferenceRequest;

describe("sequence strategies", () => {
  it("direct: max_batch_size slots, fixed positions with null requests below the highest, minimum_slot_utilization", () => {
    const direct = strategyOf(
      config({ case: "direct", value: { maxQueueDelayMicroseconds: 100n, minimumSlotUtilization: 0.5 } as never }),
    );
    expect(direct.slotsPerInstance(3)).toBe(4);
    expect(direct.delayNs).toBe(100_000n);
    expect(direct.short(1, 4)).toBe(true);
    expect(direct.short(2, 4)).toBe(false);
    expect(direct.reason(2, 4, false)).toBe("slot utilization reached");
    expect(direct.reason(1, 4, true)).toBe("delay expired");
    const { requests, at } = direct.layout([
      { sequence: sequence(2, 0n), request: request("c") },
      { sequence: sequence(0, 0n), request: request("a") },
    ]);
    expect(requests.map((r) => r.id)).toEqual(["a", "", "c"]);
    expect(at).toEqual([2, 0]);
  });

  it("direct by default, without delay", () => {
    const direct = strategyOf(config({ case: undefined }, 0));
    expect(direct.slotsPerInstance(2)).toBe(1);
    expect(direct.short(1, 1)).toBe(false);
    expect(direct.reason(1, 1, false)).toBe("no delay");
  });

  it("oldest: its share of max_candidate_sequences, oldest first, waits unless full or a preferred size", () => {
    const oldest = strategyOf(
      config({
        case: "oldest",
        value: { maxCandidateSequences: 5, preferredBatchSize: [2], maxQueueDelayMicroseconds: 10n } as never,
      }),
    );
    expect(oldest.slotsPerInstance(2)).toBe(3);
    const waiting = [sequence(0, 30n), sequence(1, 10n), sequence(2, 20n)];
    oldest.order(waiting);
    expect(waiting.map((s) => s.position)).toEqual([1, 2, 0]);
    expect([1, 2, 3, 4].map((n) => oldest.short(n, 4))).toEqual([true, false, true, false]);
    expect(oldest.reason(4, 4, false)).toBe("filled");
    expect(oldest.reason(2, 4, false)).toBe("preferred size reached");
    expect(oldest.layout([{ sequence: sequence(1, 0n), request: request("b") }]).requests.map((r) => r.id)).toEqual([
      "b",
    ]);
  });
});
