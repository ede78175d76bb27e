// The server's side of a measurement window: the model's statistics (PROTOCOL.md §8) read before and
// after, and their difference as per-request averages, as perf_analyzer reports them.
import type { ModelStatisticsResponse } from "@galley/proto";
import type { InferenceClient } from "../client-types.js";

/** Cumulative counters of a model (summed over the versions asked for). */
export interface StatsSnapshot {
  successCount: number;
  successNs: bigint;
  queueNs: bigint;
  computeInputNs: bigint;
  computeInferNs: bigint;
  computeOutputNs: bigint;
  /** Requests counted in the compute durations (once per request, as in Triton). */
  computeCount: number;
  inferenceCount: number;
  executionCount: number;
}

/** What the server did during a window, per request, in microseconds. */
export interface ServerBreakdown {
  /** Requests the server completed successfully. */
  requestCount: number;
  /** Batch elements inferred. */
  inferenceCount: number;
  /** Model executions. */
  executionCount: number;
  /** Average batch the server formed: inference_count / execution_count (0 when none ran). */
  averageBatchSize: number;
  /** Average request time inside the server (success duration). */
  requestUs: number;
  queueUs: number;
  computeInputUs: number;
  computeInferUs: number;
  computeOutputUs: number;
  /** Server time not in the queue or the compute stages (parsing, scheduling, responses). */
  overheadUs: number;
}

/** Sum the statistics of the versions that `version` selects ("" for all of them). */
export function snapshotOf(response: ModelStatisticsResponse, version: string): StatsSnapshot {
  const total: StatsSnapshot = {
    successCount: 0,
    successNs: 0n,
    queueNs: 0n,
    computeInputNs: 0n,
    computeInferNs: 0n,
    computeOutputNs: 0n,
    computeCount: 0,
    inferenceCount: 0,
    executionCount: 0,
  };
  for (const model of response.modelStats) {
    if (version !== "" && model.version !== version) continue;
    const s = model.inferenceStats;
    total.successCount += Number(s?.success?.count ?? 0n);
    total.successNs += s?.success?.ns ?? 0n;
    total.queueNs += s?.queue?.ns ?? 0n;
    total.computeInputNs += s?.computeInput?.ns ?? 0n;
    total.computeInferNs += s?.computeInfer?.ns ?? 0n;
    total.computeOutputNs += s?.computeOutput?.ns ?? 0n;
    total.computeCount += Number(s?.computeInfer?.count ?? 0n);
    total.inferenceCount += Number(model.inferenceCount);
    total.executionCount += Number(model.executionCount);
  }
  return total;
}

/** Read the model's statistics now. */
export async function takeSnapshot(client: InferenceClient, model: string, version: string): Promise<StatsSnapshot> {
  return snapshotOf(await client.statistics(model, version || undefined), version);
}

const perRequestUs = (ns: bigint, count: number) => (count > 0 ? Number(ns) / count / 1000 : 0);

/** What happened between two snapshots. */
export function difference(before: StatsSnapshot, after: StatsSnapshot): ServerBreakdown {
  const requests = after.successCount - before.successCount;
  const computed = after.computeCount - before.computeCount;
  const executions = after.executionCount - before.executionCount;
  const inferences = after.inferenceCount - before.inferenceCount;
  const requestUs = perRequestUs(after.successNs - before.successNs, requests);
  const queueUs = perRequestUs(after.queueNs - before.queueNs, requests);
  const computeInputUs = perRequestUs(after.computeInputNs - before.computeInputNs, computed);
  const computeInferUs = perRequestUs(after.computeInferNs - before.computeInferNs, computed);
  const computeOutputUs = perRequestUs(after.computeOutputNs - before.computeOutputNs, computed);
  return {
    requestCount: requests,
    inferenceCount: inferences,
    executionCount: executions,
    averageBatchSize: executions > 0 ? inferences / executions : 0,
    requestUs,
    queueUs,
    computeInputUs,
    computeInferUs,
    computeOutputUs,
    overheadUs: Math.max(0, requestUs - queueUs - computeInputUs - computeInferUs - computeOutputUs),
  };
}

/** Several windows' breakdowns as one, weighting each by its requests (and executions). */
export function mergeBreakdowns(parts: ServerBreakdown[]): ServerBreakdown {
  const requests = parts.reduce((n, p) => n + p.requestCount, 0);
  const executions = parts.reduce((n, p) => n + p.executionCount, 0);
  const inferences = parts.reduce((n, p) => n + p.inferenceCount, 0);
  const mean = (pick: (p: ServerBreakdown) => number) =>
    requests > 0 ? parts.reduce((n, p) => n + pick(p) * p.requestCount, 0) / requests : 0;
  return {
    requestCount: requests,
    inferenceCount: inferences,
    executionCount: executions,
    averageBatchSize: executions > 0 ? inferences / executions : 0,
    requestUs: mean((p) => p.requestUs),
    queueUs: mean((p) => p.queueUs),
    computeInputUs: mean((p) => p.computeInputUs),
    computeInferUs: mean((p) => p.computeInferUs),
    computeOutputUs: mean((p) => p.computeOutputUs),
    overheadUs: mean((p) => p.overheadUs),
  };
}
