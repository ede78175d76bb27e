import { fromText, toText } from "@bufbuild/protobuf/txtpb";
import { type ModelConfig, ModelConfigSchema } from "@galley/proto";

/**
 * Parse a `config.pbtxt` (protobuf text format) into a {@link ModelConfig}.
 * Unknown fields and enum values are errors, as in Triton.
 *
 * @example
 * const config = parseModelConfig('name: "simple"\nmax_batch_size: 8');
 * config.maxBatchSize // 8
 */
export function parseModelConfig(text: string): ModelConfig {
  return fromText(ModelConfigSchema, text);
}

/**
 * Print a {@link ModelConfig} as `config.pbtxt` text. Printing is stable:
 * `printModelConfig(parseModelConfig(printModelConfig(c))) === printModelConfig(c)`.
 */
export function printModelConfig(config: ModelConfig): string {
  return toText(ModelConfigSchema, config);
}
