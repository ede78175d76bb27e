import { readFile } from "node:fs/promises";
import type { ModelConfig } from "@galley/proto";
import type { ModelSource } from "../model-check.js";
import { type AutoCompleteResult, autoCompleteOnnx } from "../onnx-auto-complete.js";
import { findOnnxModelFile, missingOnnxModelMessage, OnnxModelError, readOnnxModelIO } from "../onnx-io.js";
import { Backend } from "../rules/platforms.js";

/**
 * The ONNX Runtime backend's auto-complete, reading the model file from the repository:
 * `<model>/<version>/<default_model_filename>` (a folder holding `model.onnx` also works).
 * Not run when the config already lists inputs and outputs, as in Triton.
 */
export async function onnxAutoCompleteFromDisk(
  source: ModelSource,
  config: ModelConfig,
  version: number,
  defaultMaxBatchSize?: number,
): Promise<AutoCompleteResult | undefined> {
  if (config.backend !== Backend.onnxruntime || !source.path) return undefined;
  if (config.input.length > 0 && config.output.length > 0) return undefined;
  const path = await findOnnxModelFile(source.path, version, config);
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch {
    return { config, diagnostics: [{ path: "", message: missingOnnxModelMessage(path, config) }], notes: [] };
  }
  try {
    return autoCompleteOnnx(
      config,
      readOnnxModelIO(bytes),
      defaultMaxBatchSize === undefined ? {} : { defaultMaxBatchSize },
    );
  } catch (error) {
    if (!(error instanceof OnnxModelError)) throw error;
    return {
      config,
      diagnostics: [{ path: "", message: `unable to load model '${config.name}', ${error.message}` }],
      notes: [],
    };
  }
}
