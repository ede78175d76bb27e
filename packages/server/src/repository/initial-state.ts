import type { ModelConfig } from "@galley/proto";
import { datatypeOf } from "../base/datatype.js";
import { elementCount, type Tensor } from "../base/tensor.js";
import { readModelFile } from "./model-file.js";

/**
 * Read the `initial_state` of each implicit state (`sequence_batching.state`) at load, with
 * Triton's checks and texts: `zero_data`, or `data_file` from `<model>/initial_state/` (at least
 * the state's byte size; a BYTES state takes the whole file, already length-prefixed). The
 * tensors are shared by every sequence that starts, so nothing may move or write them.
 *
 * @throws Error with Triton's message; the model then fails to load.
 */
export async function loadInitialStates(config: ModelConfig, modelPath: string): Promise<Map<string, Tensor>> {
  const states = new Map<string, Tensor>();
  if (config.schedulingChoice.case !== "sequenceBatching") return states;
  for (const state of config.schedulingChoice.value.state) {
    const initial = state.initialState[0];
    if (!initial) continue;
    const input = state.inputName;
    if (initial.name === "") {
      throw new Error(`Field 'name' must be set when using initial_state for state input '${input}'.`);
    }
    if (states.has(input)) throw new Error(`State input name '${input}' specified more than once.`);
    if (initial.dims.length !== state.dims.length) {
      throw new Error(
        `Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input '${input}'. ${initial.dims.length} != ${state.dims.length}`,
      );
    }
    const dims = initial.dims.map(Number);
    for (const [i, dim] of dims.entries()) {
      const declared = Number(state.dims[i]);
      if (dim === -1)
        throw new Error(`'initial_state' field for state input name '${input}' contains variable dimensions.`);
      if (declared !== -1 && dim !== declared) {
        throw new Error(
          `'initial_state' dim for input name '${input}' doesn't match 'state' dim description. ${dim} != ${declared}`,
        );
      }
    }
    const info = datatypeOf(initial.dataType);
    if (!info) throw new Error(`initial_state for state input '${input}' has no data type`);
    let size = elementCount(dims) * (info.byteSize > 0 ? info.byteSize : 4);
    let data: Uint8Array;
    const source = initial.stateData;
    if (source.case === "zeroData") {
      data = new Uint8Array(size);
    } else if (source.case === "dataFile") {
      const bytes = new Uint8Array(
        await readModelFile(modelPath, "initial_state", source.value, "initial_state data_file"),
      );
      if (info.byteSize === 0) size = bytes.byteLength;
      else if (size > bytes.byteLength) {
        throw new Error(
          `initial_state setting expects ${size} bytes, but the data provided from ${source.value}only has ${bytes.byteLength} bytes.`,
        );
      }
      data = bytes.subarray(0, size);
    } else {
      throw new Error(`initial_state setting expects state'${input}' to have state_data set`);
    }
    states.set(input, {
      name: input,
      datatype: info.name,
      shape: config.maxBatchSize > 0 ? [1, ...dims] : dims,
      data,
      parameters: {},
    });
  }
  return states;
}
