import {
  DataType,
  type ModelConfig,
  ModelQueuePolicy_TimeoutAction,
  type ModelSequenceBatching,
  ModelSequenceBatching_Control_Kind,
} from "@galley/proto";
import type { Diagnostic } from "../diagnostic.js";
import { validateEnsembleScheduling } from "./ensemble-graph.js";
import { KNOWN_BACKEND_TYPES, PLATFORM_BACKEND, Platform } from "./platforms.js";

/**
 * Triton's `ValidateModelConfig` (PROTOCOL.md §4.3): identity, platform/backend pair, batching,
 * dynamic and sequence batching, ensemble scheduling, response cache, metrics. Messages are
 * Triton's; Triton stops at the first, and so the first diagnostic is what Triton reports.
 * Inputs and outputs are checked by {@link validateModelIOConfig}.
 */
export function validateModelConfig(config: ModelConfig): Diagnostic[] {
  const out: Diagnostic[] = [];
  const add = (path: string, message: string) => out.push({ path, message });
  const name = config.name;
  if (name === "") add("name", "model configuration must specify 'name'");
  if (config.backend === "" && config.platform !== Platform.ensemble) {
    add("platform", `unexpected platform type '${config.platform}' for ${name}`);
  } else if (config.backend !== "" && config.platform === Platform.ensemble) {
    add("backend", `Ensemble model '${name}' must have platform type '${config.platform}' and empty backend type`);
  }
  if (KNOWN_BACKEND_TYPES.has(config.backend) && PLATFORM_BACKEND.get(config.platform) !== config.backend) {
    add("platform", `unexpected 'platform' and 'backend' pair, got:${config.platform}, ${config.backend}`);
  }
  if (config.maxBatchSize < 0) add("max_batch_size", `'max_batch_size' must be non-negative value for ${name}`);
  if (!config.versionPolicy) add("version_policy", `must specify 'version policy' for ${name}`);

  const scheduling = config.schedulingChoice;
  if (scheduling.case === "dynamicBatching") {
    const batching = scheduling.value;
    const path = "dynamic_batching";
    for (const size of batching.preferredBatchSize) {
      if (size <= 0)
        add(`${path}.preferred_batch_size`, `dynamic batching preferred size must be positive for ${name}`);
      else if (size > config.maxBatchSize) {
        add(`${path}.preferred_batch_size`, `dynamic batching preferred size must be <= max batch size for ${name}`);
      }
    }
    const levels = batching.priorityLevels;
    if (levels !== 0n) {
      if (batching.defaultPriorityLevel === 0n || batching.defaultPriorityLevel > levels) {
        add(`${path}.default_priority_level`, `default priority level must be in range [1, ${levels}] for ${name}`);
      }
      for (const key of Object.keys(batching.priorityQueuePolicy)) {
        const level = BigInt(key);
        if (level === 0n || level > levels) {
          add(
            `${path}.priority_queue_policy`,
            `priority queue policy must have priority level in range [1, ${levels}] for ${name}`,
          );
        }
      }
    }
    if (batching.preserveOrdering) {
      if (levels > 1n) {
        add(
          `${path}.preserve_ordering`,
          `Only one priority level is allowed when 'preserve_ordering' is true for ${name}`,
        );
      }
      const policies = [batching.defaultQueuePolicy, ...Object.values(batching.priorityQueuePolicy)];
      for (const policy of policies) {
        if (
          policy &&
          policy.defaultTimeoutMicroseconds !== 0n &&
          policy.timeoutAction === ModelQueuePolicy_TimeoutAction.DELAY
        ) {
          add(
            `${path}.preserve_ordering`,
            `Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for ${name}`,
          );
        }
      }
    }
  } else if (scheduling.case === "sequenceBatching") {
    validateSequenceBatching(config, scheduling.value, add);
  }

  if (scheduling.case === "ensembleScheduling") {
    out.push(...validateEnsembleScheduling(config, scheduling.value));
  } else if (config.platform === Platform.ensemble) {
    add("ensemble_scheduling", `ensemble scheduling must be set for ensemble ${name} whose platform is ensemble`);
  }
  if (config.modelTransactionPolicy?.decoupled && config.responseCache?.enable) {
    add(
      "response_cache",
      `Response Cache does not currently support model ${name} with 'decoupled' transaction policy. Please disable the response cache.`,
    );
  }
  for (const [i, control] of (config.modelMetrics?.metricControl ?? []).entries()) {
    const path = `model_metrics.metric_control[${i}]`;
    if (!control.metricIdentifier) add(path, "metric control must specify 'metric_identifier'");
    else if (control.metricIdentifier.family === "") add(path, "metric identifier must specify non-empty 'family'");
    if (control.metricOptions.case !== "histogramOptions") add(path, "metric control must specify 'histogram_options'");
    else if (control.metricOptions.value.buckets.length === 0) {
      add(path, "histogram options must specify non-empty 'buckets'");
    }
  }
  return out;
}

const Kind = ModelSequenceBatching_Control_Kind;
const CORRID_TYPES = new Set([
  DataType.TYPE_UINT64,
  DataType.TYPE_INT64,
  DataType.TYPE_UINT32,
  DataType.TYPE_INT32,
  DataType.TYPE_STRING,
]);

function validateSequenceBatching(
  config: ModelConfig,
  batching: ModelSequenceBatching,
  add: (path: string, message: string) => void,
): void {
  const name = config.name;
  const path = "sequence_batching";
  if (config.responseCache?.enable) {
    add(
      "response_cache",
      `Response Cache does not currently support model ${name} with sequence batching scheduler. Please disable the response cache.`,
    );
  }
  // Mirrors Triton's scans: one pass over all control inputs per kind (START, END, READY, CORRID),
  // each re-checking names, so the first problem is the one Triton reports. Repeats are dropped.
  const reported = new Set<string>();
  const report = (at: string, message: string) => {
    if (reported.has(message)) return;
    reported.add(message);
    add(at, message);
  };
  for (const kind of [
    Kind.CONTROL_SEQUENCE_START,
    Kind.CONTROL_SEQUENCE_END,
    Kind.CONTROL_SEQUENCE_READY,
    Kind.CONTROL_SEQUENCE_CORRID,
  ]) {
    const kindName = Kind[kind];
    const names = new Set<string>();
    let found = false;
    for (const [i, input] of batching.controlInput.entries()) {
      const at = `${path}.control_input[${i}]`;
      if (input.name === "") report(at, `sequence batching control tensor must have a name for ${name}`);
      else if (names.has(input.name)) {
        report(
          at,
          `sequence batching control tensor '${input.name}' is specified for multiple control kinds for ${name}`,
        );
      }
      names.add(input.name);
      for (const control of input.control) {
        if (control.kind !== kind) continue;
        if (found) {
          report(at, `sequence batching specifies multiple ${kindName} tensors for ${name}`);
          continue;
        }
        found = true;
        const lists = [
          ["int32_false_true", control.int32FalseTrue.length],
          ["fp32_false_true", control.fp32FalseTrue.length],
          ["bool_false_true", control.boolFalseTrue.length],
        ] as const;
        const given = lists.filter(([, length]) => length > 0);
        if (kind === Kind.CONTROL_SEQUENCE_CORRID) {
          if (given.length > 0) {
            report(
              at,
              `sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for ${kindName} for ${name}`,
            );
          } else if (!CORRID_TYPES.has(control.dataType)) {
            report(
              at,
              `unexpected data type for control ${kindName} for ${name}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING`,
            );
          }
        } else if (given.length === 0) {
          report(
            at,
            `sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for ${kindName} for ${name}`,
          );
        } else if (given.length > 1) {
          report(
            at,
            `sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for ${kindName} for ${name}`,
          );
        } else {
          const [list, length] = given[0] ?? ["", 0];
          if (length !== 2) {
            report(at, `sequence batching control '${list}' must have exactly 2 entries for ${kindName} for ${name}`);
          }
        }
      }
    }
  }
  const strategy = batching.strategyChoice;
  if (strategy.case === "oldest") {
    for (const size of strategy.value.preferredBatchSize) {
      if (size <= 0)
        add(
          `${path}.oldest.preferred_batch_size`,
          `sequence batching preferred batch size must be positive for ${name}`,
        );
      else if (size > config.maxBatchSize) {
        add(
          `${path}.oldest.preferred_batch_size`,
          `sequence batching preferred batch size must be <= max batch size for ${name}`,
        );
      }
    }
  } else if (strategy.case === "direct") {
    const utilization = strategy.value.minimumSlotUtilization;
    // Triton's text says (0.0, 1.0], but its check accepts 0.0.
    if (utilization < 0 || utilization > 1) {
      add(
        `${path}.direct.minimum_slot_utilization`,
        `sequence batching minimum slot utilization must be in range (0.0, 1.0] for ${name}`,
      );
    }
  }
}
