/**
 * One problem found in a model configuration. `message` is Triton's text where Triton has one,
 * so it can be compared with what Triton reports; `path` points into the config in text-format
 * field names (`input[0].dims`, `dynamic_batching.preferred_batch_size`), empty for the whole model.
 */
export interface Diagnostic {
  path: string;
  message: string;
}
