import { type ModelConfig, ModelInstanceGroup_Kind } from "@galley/proto";

/** One instance a model's `instance_group`s ask for. */
export interface InstanceSpec {
  /** `<group name>_<i>`, as Triton names instances. */
  name: string;
  /** Where it runs: KIND_AUTO already resolved (see {@link instanceSpecs}). */
  kind: "CPU" | "GPU" | "MODEL";
  /** The GPU it runs on (0 for CPU instances), as Triton's `model_instance_device_id`. */
  device: number;
  rateLimiter: ModelConfig["instanceGroup"][number]["rateLimiter"];
  passive: boolean;
}

/**
 * The instances a config's groups ask for, in order: `count` of each (at least one), and for a
 * KIND_GPU group `count` on each GPU it lists. KIND_AUTO becomes `auto`: CPU for backends that have
 * no GPU of their own.
 */
export function instanceSpecs(config: ModelConfig, auto: "CPU" | "GPU" = "CPU"): InstanceSpec[] {
  return config.instanceGroup.flatMap((group) => {
    const kind =
      group.kind === ModelInstanceGroup_Kind.GPU
        ? "GPU"
        : group.kind === ModelInstanceGroup_Kind.MODEL
          ? "MODEL"
          : group.kind === ModelInstanceGroup_Kind.AUTO
            ? auto
            : "CPU";
    return groupInstances(group, kind, group.gpus);
  });
}

/**
 * One group's instances as {@link instanceSpecs} orders them, run as `kind` on `gpus` (a GPU group's
 * own list, or the GPUs a backend chose for it): as Triton, `count` on each GPU, each count every
 * GPU in turn, so the first idle instances a scheduler picks are on different GPUs.
 */
export function groupInstances(
  group: ModelConfig["instanceGroup"][number],
  kind: InstanceSpec["kind"],
  gpus: readonly number[],
): InstanceSpec[] {
  const devices = kind === "GPU" && gpus.length > 0 ? gpus : [0];
  return Array.from({ length: Math.max(1, group.count) * devices.length }, (_, i) => ({
    name: `${group.name}_${i}`,
    kind,
    device: devices[i % devices.length] ?? 0,
    rateLimiter: group.rateLimiter,
    passive: group.passive,
  }));
}

/**
 * The `args` Triton gives a scripted or Python model's `initialize`: its final config as JSON,
 * where the instance runs, and where the model lives.
 */
export function initializeArgs(
  config: ModelConfig,
  spec: InstanceSpec,
  modelConfigJson: string,
  location: { modelPath: string; version: number },
): Record<string, string> {
  return {
    model_config: modelConfigJson,
    model_instance_kind: `KIND_${spec.kind}`,
    model_instance_name: spec.name,
    model_instance_device_id: String(spec.device),
    model_repository: location.modelPath,
    model_version: String(location.version),
    model_name: config.name,
  };
}

/**
 * A config parameter that must be a whole number (`execute_timeout_ms`, ...), or undefined
 * when the config does not set it. @throws Error naming the parameter and the model otherwise.
 */
export function wholeNumberParameter(config: ModelConfig, key: string): number | undefined {
  const value = config.parameters[key]?.stringValue;
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value.trim())) {
    throw new Error(`parameter '${key}' of model '${config.name}' must be a whole number, got '${value}'`);
  }
  return Number(value);
}

/** A `true`/`false` parameter (any case), or undefined when absent. @throws Error naming the model for any other value. */
export function booleanParameter(config: ModelConfig, key: string): boolean | undefined {
  const value = config.parameters[key]?.stringValue;
  if (value === undefined) return undefined;
  const word = value.trim().toLowerCase();
  if (word !== "true" && word !== "false") {
    throw new Error(`parameter '${key}' of model '${config.name}' must be true or false, got '${value}'`);
  }
  return word === "true";
}
