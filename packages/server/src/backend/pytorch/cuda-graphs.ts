import type { ModelConfig } from "@galley/proto";

/**
 * How a PyTorch model's GPU instances use CUDA graphs, from Triton's `optimization { cuda {
 * graphs: true graph_spec [...] } }` (which Triton itself reads only in its TensorRT backend).
 */
export interface CudaGraphPlan {
  /** The most graphs an instance keeps: one per `graph_spec`, else 16 or `max_batch_size`. */
  limit: number;
  /**
   * Whether a batch with these input shapes (by input name, the batch dimension included) may run
   * as a graph: always without `graph_spec`, else when a spec names exactly these shapes.
   */
  allows(shapes: ReadonlyMap<string, readonly number[]>): boolean;
  /** Parts of the config that have no effect here, for the load log. */
  notes: string[];
}

/** Graphs per instance without `graph_spec`: every batch size of a model with fixed dims. */
const DEFAULT_LIMIT = 16;
/** The most the addon keeps per instance. */
const MAX_LIMIT = 4096;

/** The plan for `config`, or undefined when `optimization.cuda.graphs` is off. */
export function cudaGraphPlan(config: ModelConfig): CudaGraphPlan | undefined {
  const cuda = config.optimization?.cuda;
  if (!cuda?.graphs) return undefined;
  const batching = config.maxBatchSize > 0;
  const inputs = new Set(config.input.map((i) => i.name));
  const notes: string[] = [];
  const specs = cuda.graphSpec.map((spec, n) => {
    if (spec.graphLowerBound) {
      notes.push(`graph_spec ${n}: graph_lower_bound is not used; a graph is captured for the spec's exact shapes`);
    }
    const shapes = new Map<string, number[]>();
    for (const [name, shape] of Object.entries(spec.input)) {
      if (!inputs.has(name)) notes.push(`graph_spec ${n} names input '${name}', which the model does not have`);
      const dims = shape.dim.map(Number);
      shapes.set(name, batching ? [spec.batchSize, ...dims] : dims);
    }
    return shapes;
  });
  if (cuda.busyWaitEvents) notes.push("busy_wait_events is not used by the PyTorch backend");
  if (cuda.outputCopyStream) notes.push("output_copy_stream is not used by the PyTorch backend");
  const same = (a: readonly number[], b: readonly number[] | undefined) =>
    b !== undefined && a.length === b.length && a.every((d, i) => d === b[i]);
  return {
    limit: Math.min(specs.length > 0 ? specs.length : Math.max(DEFAULT_LIMIT, config.maxBatchSize), MAX_LIMIT),
    allows:
      specs.length === 0
        ? () => true
        : (shapes) =>
            specs.some(
              (spec) => spec.size === shapes.size && [...shapes].every(([name, shape]) => same(shape, spec.get(name))),
            ),
    notes,
  };
}

/** A batch's input shapes by name (with batching, the requests' batch dimensions summed). */
export function batchShapes(
  requests: readonly { inputs: readonly { name: string; shape: readonly number[] }[] }[],
  batching: boolean,
): Map<string, number[]> {
  const shapes = new Map<string, number[]>();
  for (const request of requests) {
    for (const input of request.inputs) {
      const seen = shapes.get(input.name);
      if (!seen) shapes.set(input.name, [...input.shape]);
      else if (batching) seen[0] = (seen[0] ?? 0) + (input.shape[0] ?? 0);
    }
  }
  return shapes;
}

/** `LATENT [5,4,8,8], TIMESTEP [5,1]`, for logs. */
export function describeShapes(shapes: ReadonlyMap<string, readonly number[]>): string {
  return [...shapes].map(([name, shape]) => `${name} [${shape.join(",")}]`).join(", ");
}
