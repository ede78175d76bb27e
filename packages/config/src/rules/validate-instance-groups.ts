import { type ModelConfig, ModelInstanceGroup_Kind } from "@galley/proto";
import type { Diagnostic } from "../diagnostic.js";
import { Platform } from "./platforms.js";

/** Options for {@link validateInstanceGroups}. */
export interface InstanceGroupCheckOptions {
  /** GPU ids this server can use. */
  gpus?: readonly number[];
  /** The minimum CUDA compute capability, named in the message for an unusable GPU id. Default 7.5. */
  minComputeCapability?: number;
}

/**
 * Triton's `ValidateInstanceGroup` (PROTOCOL.md §4.3), after {@link normalizeInstanceGroups}:
 * GPU ids must exist, CPU and MODEL groups list no GPUs, `profile` is TensorRT only. Galley finds
 * CUDA at run time, so it answers as Triton's GPU-enabled build does.
 */
export function validateInstanceGroups(config: ModelConfig, options: InstanceGroupCheckOptions = {}): Diagnostic[] {
  const out: Diagnostic[] = [];
  const gpus = options.gpus ?? [];
  const m = config.name;
  if (config.instanceGroup.length === 0)
    out.push({ path: "instance_group", message: `must specify one or more 'instance group's for ${m}` });
  config.instanceGroup.forEach((group, i) => {
    const path = `instance_group[${i}]`;
    const add = (message: string) => out.push({ path, message });
    const g = group.name;
    switch (group.kind) {
      case ModelInstanceGroup_Kind.MODEL:
        if (group.gpus.length > 0)
          add(`instance group ${g} of model ${m} has kind KIND_MODEL but specifies one or more GPUs`);
        break;
      case ModelInstanceGroup_Kind.CPU:
        if (group.gpus.length > 0)
          add(`instance group ${g} of model ${m} has kind KIND_CPU but specifies one or more GPUs`);
        break;
      case ModelInstanceGroup_Kind.GPU:
        if (group.gpus.length === 0) {
          add(
            gpus.length === 0
              ? `instance group ${g} of model ${m} has kind KIND_GPU but no GPUs are available`
              : `instance group ${g} of model ${m} has kind KIND_GPU but specifies no GPUs`,
          );
        }
        for (const id of group.gpus) {
          if (!gpus.includes(id)) {
            const capability = (options.minComputeCapability ?? 7.5).toFixed(6);
            add(
              `instance group ${g} of model ${m} specifies invalid or unsupported gpu id ${id}. GPUs with at least the minimum required CUDA compute compatibility of ${capability} are: ${gpus.join(", ")}`,
            );
          }
        }
        break;
      default:
        add(
          `instance group ${g} of model ${m} has unexpected kind KIND_${ModelInstanceGroup_Kind[group.kind] ?? group.kind}`,
        );
    }
    if (config.platform !== Platform.tensorrtPlan && group.profile.length > 0) {
      add(
        `instance group ${g} of model ${m} and platform ${config.platform}specifies profile field which is only supported for TensorRT models`,
      );
    }
  });
  return out;
}
