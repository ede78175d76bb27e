// The requests the load sends, cycling through the input sets: tensors in the request body, or
// (`--shared-memory system`) placed once in registered /dev/shm regions that every request names.
import type { InferenceClient, InferOptions } from "../client-types.js";
import { SystemSharedMemory } from "../shared-memory.js";
import type { InputSet, OutputSpec } from "./inputs.js";

/** Hands out the next request; `dispose` releases what it holds (shared-memory regions). */
export interface RequestSource {
  next(): InferOptions;
  dispose(): Promise<void>;
}

/** Requests with their tensors in the body. */
export function bodyRequests(sets: InputSet[], version: string): RequestSource {
  let at = 0;
  const requests: InferOptions[] = sets.map((inputs) => ({ inputs, ...(version ? { version } : {}) }));
  return {
    next: () => requests[at++ % requests.length] as InferOptions,
    dispose: async () => {},
  };
}

const ALIGN = 64;
const aligned = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

/**
 * Requests whose inputs are read from, and outputs written into, registered system shared-memory
 * regions: one region holds every input set (written once, before the load), one the outputs. As
 * in perf_analyzer, requests in flight together share the output region; its contents are not read.
 */
export async function sharedMemoryRequests(
  client: InferenceClient,
  sets: InputSet[],
  outputs: OutputSpec[],
  outputSharedMemorySize: number,
  version: string,
): Promise<RequestSource> {
  const inputBytes = sets.reduce(
    (n, set) => n + Object.values(set).reduce((m, t) => m + aligned(t.data.byteLength), 0),
    0,
  );
  const outputSizes = outputs.map((o) => o.byteSize ?? outputSharedMemorySize);
  const outputBytes = outputSizes.reduce((n, size) => n + aligned(size), 0);
  const inputRegion = await SystemSharedMemory.create(Math.max(inputBytes, 1), { client });
  let outputRegion: SystemSharedMemory;
  try {
    outputRegion = await SystemSharedMemory.create(Math.max(outputBytes, 1), { client });
  } catch (error) {
    await inputRegion.dispose();
    throw error;
  }
  const dispose = async () => {
    await Promise.all([inputRegion.dispose(), outputRegion.dispose()]);
  };
  try {
    let offset = 0;
    const placedOutputs = outputs.map((o, i) => {
      const size = outputSizes[i] as number;
      const placed = outputRegion.output(o.name, offset, size);
      offset += aligned(size);
      return placed;
    });
    offset = 0;
    const requests: InferOptions[] = [];
    for (const set of sets) {
      const inputs: InferOptions["inputs"] = {};
      for (const [name, tensor] of Object.entries(set)) {
        await inputRegion.write(offset, tensor.data);
        inputs[name] = inputRegion.input(tensor.datatype, tensor.shape, offset, tensor.data.byteLength);
        offset += aligned(tensor.data.byteLength);
      }
      requests.push({ inputs, outputs: placedOutputs, ...(version ? { version } : {}) });
    }
    let at = 0;
    return { next: () => requests[at++ % requests.length] as InferOptions, dispose };
  } catch (error) {
    await dispose();
    throw error;
  }
}
