import { create } from "@bufbuild/protobuf";
import {
  type ModelConfig,
  ModelInstanceGroup_Kind,
  ModelInstanceGroupSchema,
  ModelOptimizationPolicy_PinnedMemoryBufferSchema,
  ModelOptimizationPolicySchema,
  ModelVersionPolicySchema,
} from "@galley/proto";
import { Backend } from "./platforms.js";

/** Triton's default for `max_sequence_idle_microseconds` (one second). */
export const SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000n;

/**
 * Fill Triton's defaults, as `NormalizeModelConfig` does (PROTOCOL.md §4.2), in its order:
 * version policy `latest { num_versions: 1 }`; `preferred_batch_size: [max_batch_size]` for
 * dynamic batching and the oldest sequence strategy (only when `max_batch_size > 0`);
 * `max_sequence_idle_microseconds` 0 → 1 s; pinned input/output memory on for non-ensembles.
 * Mutates `config`.
 */
export function normalizeModelConfig(config: ModelConfig): void {
  if (!config.versionPolicy) {
    config.versionPolicy = create(ModelVersionPolicySchema, {
      policyChoice: { case: "latest", value: { numVersions: 1 } },
    });
  }
  const scheduling = config.schedulingChoice;
  if (scheduling.case === "dynamicBatching") {
    if (scheduling.value.preferredBatchSize.length === 0 && config.maxBatchSize > 0) {
      scheduling.value.preferredBatchSize.push(config.maxBatchSize);
    }
  } else if (scheduling.case === "sequenceBatching") {
    if (scheduling.value.maxSequenceIdleMicroseconds === 0n) {
      scheduling.value.maxSequenceIdleMicroseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS;
    }
    const strategy = scheduling.value.strategyChoice;
    if (strategy.case === "oldest" && strategy.value.preferredBatchSize.length === 0 && config.maxBatchSize > 0) {
      strategy.value.preferredBatchSize.push(config.maxBatchSize);
    }
  }
  if (scheduling.case !== "ensembleScheduling") {
    config.optimization ??= create(ModelOptimizationPolicySchema);
    config.optimization.inputPinnedMemory ??= create(ModelOptimizationPolicy_PinnedMemoryBufferSchema, {
      enable: true,
    });
    config.optimization.outputPinnedMemory ??= create(ModelOptimizationPolicy_PinnedMemoryBufferSchema, {
      enable: true,
    });
  }
}

/** Options for {@link normalizeInstanceGroups}. */
export interface InstanceGroupOptions {
  /** GPU ids this server can use (empty on a machine without CUDA). */
  gpus?: readonly number[];
  /** The backend's preferred groups, used when the config has none (ONNX Runtime has none). */
  preferredGroups?: readonly { kind: ModelInstanceGroup_Kind; count: number; gpus?: readonly number[] }[];
}

/**
 * Fill instance groups as Triton's `NormalizeInstanceGroup` does (PROTOCOL.md §4.2): one group
 * named `<model>` when none is given; names `<model>_<index>`; KIND_AUTO resolved to GPU or CPU;
 * count < 1 becomes 1 (2 for CPU groups of onnxruntime and tensorflow); GPU groups without ids
 * get every GPU. Not for ensembles. Mutates `config`.
 */
export function normalizeInstanceGroups(config: ModelConfig, options: InstanceGroupOptions = {}): void {
  const gpus = options.gpus ?? [];
  const preferred = options.preferredGroups ?? [];
  if (config.instanceGroup.length === 0) {
    const usable = preferred.find((p) => p.kind !== ModelInstanceGroup_Kind.GPU || gpus.length > 0);
    config.instanceGroup.push(
      create(ModelInstanceGroupSchema, {
        name: config.name,
        kind: usable?.kind ?? ModelInstanceGroup_Kind.AUTO,
        count: usable?.count ?? 0,
        gpus:
          usable?.kind === ModelInstanceGroup_Kind.GPU
            ? (usable.gpus ?? []).filter((g) => gpus.includes(g))
            : [...(usable?.gpus ?? [])],
      }),
    );
  }
  config.instanceGroup.forEach((group, index) => {
    if (group.name === "") group.name = `${config.name}_${index}`;
    if (group.kind === ModelInstanceGroup_Kind.AUTO) {
      group.kind =
        gpus.length === 0 || group.gpus.some((g) => !gpus.includes(g))
          ? ModelInstanceGroup_Kind.CPU
          : ModelInstanceGroup_Kind.GPU;
    }
    for (const p of preferred) {
      if (p.kind !== group.kind) continue;
      if (group.kind === ModelInstanceGroup_Kind.GPU && group.gpus.length === 0 && (p.gpus?.length ?? 0) > 0) {
        group.gpus.push(...(p.gpus ?? []).filter((g) => gpus.includes(g)));
        if (group.gpus.length === 0) continue;
      }
      if (group.count < 1 && p.count > 0) group.count = p.count;
    }
    if (group.count < 1) {
      const doubled =
        group.kind === ModelInstanceGroup_Kind.CPU &&
        (config.backend === Backend.onnxruntime || config.backend === Backend.tensorflow);
      group.count = doubled ? 2 : 1;
    }
    if (group.kind === ModelInstanceGroup_Kind.GPU && group.gpus.length === 0) group.gpus.push(...gpus);
  });
}
