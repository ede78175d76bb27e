import { create } from "@bufbuild/protobuf";
import { type ModelStatisticsResponse, ModelStatisticsResponseSchema } from "@galley/proto";
import type { Duration } from "../base/statistics.js";
import type { LoadedModel } from "../repository/loaded-model.js";

const duration = (d: Duration) => ({ count: BigInt(d.count), ns: d.ns });

/**
 * The statistics extension's answer for these model versions (PROTOCOL.md §8), as the protocol
 * message; the REST frontend prints the same message as JSON.
 */
export function statisticsResponse(models: readonly LoadedModel[]): ModelStatisticsResponse {
  return create(ModelStatisticsResponseSchema, {
    modelStats: models.map((m) => {
      const s = m.stats;
      return {
        name: m.name,
        version: String(m.version),
        lastInference: BigInt(s.lastInference),
        inferenceCount: BigInt(s.inferenceCount),
        executionCount: BigInt(s.executionCount),
        inferenceStats: {
          success: duration(s.success),
          fail: duration(s.fail),
          queue: duration(s.queue),
          computeInput: duration(s.computeInput),
          computeInfer: duration(s.computeInfer),
          computeOutput: duration(s.computeOutput),
          cacheHit: duration(s.cacheHit),
          cacheMiss: duration(s.cacheMiss),
        },
        batchStats: [...s.batches]
          .sort((a, b) => a[0] - b[0])
          .map(([size, b]) => ({
            batchSize: BigInt(size),
            computeInput: duration(b.computeInput),
            computeInfer: duration(b.computeInfer),
            computeOutput: duration(b.computeOutput),
          })),
        // What the version holds, measured across its load (Triton's field for backend-reported usage).
        memoryUsage: m.memory.map((u) => ({ type: u.type, id: BigInt(u.id), byteSize: BigInt(u.byteSize) })),
      };
    }),
  });
}
