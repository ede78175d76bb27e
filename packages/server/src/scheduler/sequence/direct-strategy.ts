import type { ModelConfig, ModelSequenceBatching } from "@galley/proto";
import { encodeBytesElements } from "@galley/proto";
import type { InferenceRequest } from "../../base/inference-request.js";
import { elementCount, type Tensor } from "../../base/tensor.js";
import type { Sequence } from "./sequence.js";
import { type CorrelationId, controlTensors } from "./sequence-controls.js";
import type { BatchItem, BatchLayout, SequenceStrategy } from "./sequence-strategy.js";

/**
 * Triton's `direct` strategy (the default): an instance holds `max_batch_size` sequences (at
 * least one), each at a fixed batch position from its START to its END; empty positions below the
 * highest one in use get null requests; a batch may wait up to its delay for
 * `minimum_slot_utilization` of its positions to have a request (with 0, it never waits).
 */
export class DirectStrategy implements SequenceStrategy {
  readonly delayNs: bigint;
  readonly #config: ModelConfig;
  readonly #batching: ModelSequenceBatching;
  readonly #utilization: number;

  constructor(config: ModelConfig, batching: ModelSequenceBatching) {
    this.#config = config;
    this.#batching = batching;
    const strategy = batching.strategyChoice;
    this.delayNs = (strategy.value?.maxQueueDelayMicroseconds ?? 0n) * 1000n;
    this.#utilization = strategy.case === "direct" ? strategy.value.minimumSlotUtilization : 0;
  }

  slotsPerInstance(): number {
    return Math.max(1, this.#config.maxBatchSize);
  }

  /** Waiting sequences are already in position order. */
  order(): void {}

  short(size: number, max: number): boolean {
    return this.#utilization > 0 && size / max < this.#utilization;
  }

  reason(_size: number, _max: number, short: boolean): string {
    if (this.delayNs === 0n || this.#utilization === 0) return "no delay";
    return short ? "delay expired" : "slot utilization reached";
  }

  /** Every position up to the highest one in use: the empty ones get null requests. */
  batchSize(sequences: readonly Sequence[]): number {
    return Math.max(0, ...sequences.map((s) => s.position + 1));
  }

  /** Each sequence at its position; the positions below the highest one in use that have no request get a null request. */
  layout(items: readonly BatchItem[]): BatchLayout {
    const requests: InferenceRequest[] = [];
    const at = items.map((_, i) => i);
    const byPosition = new Map(items.map((item, i) => [item.sequence.position, i]));
    const top = Math.max(...byPosition.keys());
    const model = items[0] as BatchItem;
    for (let position = 0; position <= top; position++) {
      const i = byPosition.get(position);
      if (i !== undefined) {
        at[i] = requests.length;
        requests.push((items[i] as BatchItem).request);
      } else requests.push(this.#nullRequest(model.request, model.sequence.id));
    }
    return { requests, at };
  }

  /**
   * Triton's null request for an empty position of a direct batch: `model`'s inputs, shapes and
   * outputs with zero data (its state inputs too), every control false (READY too), a zero
   * correlation id and no sequence parameters. Its outputs are dropped; no sequence's state changes.
   */
  #nullRequest(model: InferenceRequest, id: CorrelationId): InferenceRequest {
    const controls = new Set(this.#batching.controlInput.map((c) => c.name));
    const zeros = (t: Tensor): Tensor => ({
      ...t,
      data:
        t.datatype === "BYTES"
          ? encodeBytesElements(Array.from({ length: elementCount(t.shape) }, () => new Uint8Array(0)))
          : new Uint8Array(t.data.byteLength),
      parameters: {},
      movable: true,
    });
    const signals = { start: false, end: false, ready: false, correlationId: typeof id === "string" ? "" : 0n };
    return {
      modelName: model.modelName,
      modelVersion: model.modelVersion,
      id: "",
      parameters: {},
      inputs: [
        ...model.inputs.filter((t) => !controls.has(t.name)).map(zeros),
        ...controlTensors(this.#batching, signals, this.#config.maxBatchSize > 0),
      ],
      outputs: model.outputs,
    };
  }
}
