// BLS calls a scripted model marks `direct`: its worker runs the target model's batches itself,
// on the model's native threads, without the model's scheduler and without the main thread. The
// core says which models allow it and hands the worker what it needs (a route); the worker
// reports each call back for the model's statistics.
import type { DirectRecord, DirectRoute } from "../backend/backend.js";
import { hostTransfers } from "../base/host-transfers.js";
import type { LoadedModel } from "../repository/loaded-model.js";

/**
 * The route to `model`, when a direct call keeps its meaning: a model that answers once per
 * request (not decoupled) and keeps no state between requests (no sequence batching), without a
 * response cache or rate limiter to honour, whose backend can run batches from a worker (the
 * PyTorch backend, every instance up). What a direct call does without — the dynamic batcher's
 * merging, queue policies, priorities — is for its caller to decide (its call is a batch already).
 */
export function directRoute(model: LoadedModel): DirectRoute | undefined {
  const config = model.config;
  if (model.decoupled || config.responseCache?.enable) return undefined;
  const scheduling = config.schedulingChoice.case;
  if (scheduling === "sequenceBatching" || scheduling === "ensembleScheduling") return undefined;
  if (config.instanceGroup.some((group) => group.rateLimiter)) return undefined;
  const target = model.backend.directTarget?.();
  if (!target || target.instances === 0) return undefined;
  return { model: model.name, version: model.version, config, target };
}

const FAILURES: ReadonlySet<string> = new Set<string>([
  "OTHER",
  "BACKEND",
  "CANCELED",
] satisfies DirectRecord["failure"][]);

/** Count a direct call in `model`'s statistics and transfers, as the scheduler and core count theirs. */
export function recordDirect(model: LoadedModel, record: DirectRecord): void {
  const ns = (n: number) => BigInt(Number.isFinite(n) && n > 0 ? Math.round(n) : 0);
  const execution = record.execution;
  if (execution && Number.isInteger(execution.batchSize) && execution.batchSize > 0) {
    model.stats.recordExecution(
      execution.batchSize,
      // The calls a worker ran as one batch (each call's phases count once per request).
      Number.isInteger(execution.requests) && (execution.requests ?? 0) > 0 ? (execution.requests as number) : 1,
      ns(execution.inputNs),
      ns(execution.inferNs),
      ns(execution.outputNs),
      // A model run directly has all its instances on one GPU, if on any.
      model.backend.deviceTensors?.deviceId,
    );
  }
  if (record.failure === undefined) {
    model.stats.recordFirstResponse(ns(record.totalNs));
    model.stats.recordSuccess(ns(record.totalNs), 0n);
  } else model.stats.recordFailure(ns(record.totalNs), FAILURES.has(record.failure) ? record.failure : "OTHER");
  if (record.transfers) hostTransfers.record(model.name, record.transfers);
}
