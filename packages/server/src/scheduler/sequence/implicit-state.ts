import type { ModelConfig, ModelSequenceBatching } from "@galley/proto";
import { datatypeOf } from "../../base/datatype.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import { elementCount, type Tensor } from "../../base/tensor.js";
import { type ControlSignals, controlTensors } from "./sequence-controls.js";

/**
 * Triton's implicit state (`sequence_batching.state`): each state output of a sequence's request
 * becomes the state input of its next one. The batcher gives each request its control inputs and
 * its sequence's state here, and hands back only the outputs the client may see.
 */
export class ImplicitState {
  readonly #config: ModelConfig;
  readonly #batching: ModelSequenceBatching;
  readonly #initialStates: ReadonlyMap<string, Tensor>;
  /** The state outputs' names (fed back as their inputs). */
  readonly #outputs: readonly string[];

  constructor(config: ModelConfig, batching: ModelSequenceBatching, initialStates: ReadonlyMap<string, Tensor>) {
    this.#config = config;
    this.#batching = batching;
    this.#initialStates = initialStates;
    this.#outputs = batching.state.map((s) => s.outputName);
  }

  /**
   * Each state input's value on a sequence's first request: its `initial_state` (shared by every
   * sequence, never moved), or zeros of the state's dims.
   */
  initial(batched: boolean): Map<string, Tensor> {
    const state = new Map<string, Tensor>();
    for (const s of this.#batching.state) {
      const initial = this.#initialStates.get(s.inputName);
      if (initial) {
        state.set(s.inputName, initial);
        continue;
      }
      const dims = s.dims.map(Number).map((d) => (d < 0 ? 1 : d));
      const info = datatypeOf(s.dataType);
      if (!info) continue;
      const size = info.byteSize > 0 ? elementCount(dims) * info.byteSize : elementCount(dims) * 4;
      state.set(s.inputName, {
        name: s.inputName,
        datatype: info.name,
        shape: batched ? [1, ...dims] : dims,
        data: new Uint8Array(size),
        parameters: {},
      });
    }
    return state;
  }

  /**
   * A client request as the model receives it: plus the control inputs and the implicit state.
   * The state outputs are fetched with what the client asked for (every config output when it
   * named none): backends return only the outputs a request names or the config lists.
   */
  request(request: InferenceRequest, signals: ControlSignals, state: Map<string, Tensor>): InferenceRequest {
    const batched = this.#config.maxBatchSize > 0;
    const asked = request.outputs;
    return {
      ...request,
      inputs: [...request.inputs, ...controlTensors(this.#batching, signals, batched), ...state.values()],
      outputs:
        this.#outputs.length === 0
          ? asked
          : [
              ...(asked.length > 0 ? asked : this.#config.output.map((o) => ({ name: o.name, parameters: {} }))),
              ...this.#outputs
                .filter((name) => !asked.some((o) => o.name === name))
                .map((name) => ({ name, parameters: {} })),
            ],
    };
  }

  /**
   * Take a response's state outputs into the sequence's state; returns the outputs the
   * client sees (a state output only if it asked for it by name).
   */
  update(state: Map<string, Tensor>, outcome: readonly Tensor[], asked: InferenceRequest): Tensor[] {
    for (const s of this.#batching.state) {
      const next = outcome.find((t) => t.name === s.outputName);
      if (next) state.set(s.inputName, { ...next, name: s.inputName, movable: false });
    }
    return outcome.filter((t) => !this.#outputs.includes(t.name) || asked.outputs.some((o) => o.name === t.name));
  }
}
