import { randomFillSync } from "node:crypto";
import { DataType, type ModelConfig } from "@galley/proto";
import type { BackendInstance } from "../backend/backend.js";
import { datatypeOf } from "../core/datatype.js";
import type { InferenceRequest } from "../core/inference-request.js";
import { elementCount, type Tensor } from "../core/tensor.js";
import { readModelFile } from "./model-file.js";

/**
 * Run the config's `model_warmup` samples on every instance before the model is READY, as
 * Triton does: each sample is `batch_size` requests of batch 1 sent together, `count` times
 * (at least once), with zero, random or file data (`<model>/warmup/<file>`). A sample that
 * fails fails the load with Triton's `failed to run warmup sample '<name>': <error>; `.
 */
export async function warmUp(
  config: ModelConfig,
  instances: readonly BackendInstance[],
  modelPath: string,
): Promise<void> {
  for (const sample of config.modelWarmup) {
    if (sample.batchSize === 0) continue;
    const inputs = await Promise.all(
      Object.entries(sample.inputs).map(async ([name, input]): Promise<Tensor> => {
        const info = datatypeOf(input.dataType);
        if (!info) throw new Error(`warmup setting has no data type for input '${name}'`);
        const dims = input.dims.map(Number);
        if (dims.some((d) => d < 0)) {
          throw new Error(`warmup setting expects all variable-size dimensions are specified for input '${name}'`);
        }
        const isModelInput = config.input.some((i) => i.name === name);
        const shape = config.maxBatchSize > 0 && isModelInput ? [1, ...dims] : dims;
        const count = elementCount(dims);
        const size = info.byteSize > 0 ? count * info.byteSize : count * 4;
        const data = new Uint8Array(size);
        const source = input.inputDataType;
        if (source.case === "randomData" && info.byteSize > 0) {
          randomFillSync(data);
          if (input.dataType === DataType.TYPE_BOOL) for (let i = 0; i < data.length; i++) data[i] = (data[i] ?? 0) & 1;
        } else if (source.case === "inputDataFile") {
          const bytes = await readModelFile(modelPath, "warmup", source.value, "warmup input_data_file");
          if (info.byteSize > 0 && bytes.byteLength < size) {
            throw new Error(
              `warmup setting expects ${size} bytes, but the data provided from ${source.value}only has ${bytes.byteLength} bytes`,
            );
          }
          return {
            name,
            datatype: info.name,
            shape,
            data: info.byteSize > 0 ? bytes.subarray(0, size) : bytes,
            parameters: {},
          };
        } else if (source.case === undefined) {
          throw new Error(`warmup setting expects input '${name}' to have input_data_type set`);
        }
        return { name, datatype: info.name, shape, data, parameters: {} };
      }),
    );
    const requests: InferenceRequest[] = Array.from({ length: sample.batchSize }, () => ({
      modelName: config.name,
      modelVersion: "",
      id: "",
      parameters: {},
      inputs,
      outputs: [],
    }));
    for (let round = 0; round < Math.max(1, sample.count); round++) {
      for (const instance of instances) {
        const result = await instance.execute(requests);
        const failure = result.responses.find((r): r is Error => r instanceof Error);
        if (failure) throw new Error(`failed to run warmup sample '${sample.name}': ${failure.message}; `);
      }
    }
  }
}
