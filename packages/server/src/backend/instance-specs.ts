import { type ModelConfig, ModelInstanceGroup_Kind } from "@galley/proto";

/** One instance a model's `instance_group`s ask for. */
export interface InstanceSpec {
  /** `<group name>_<i>`, as Triton names instances. */
  name: string;
  /** Where it runs: KIND_AUTO already resolved (see {@link instanceSpecs}). */
  kind: "CPU" | "GPU" | "MODEL";
  /** The GPU it is given (`gpus[i]` round robin, 0 when none is listed), as Triton's `model_instance_device_id`. */
  device: number;
  rateLimiter: ModelConfig["instanceGroup"][number]["rateLimiter"];
  passive: boolean;
}

/**
 * The instances a config's groups ask for, `count` of each (at least one), in order.
 * KIND_AUTO becomes `auto`: CPU for backends that have no GPU of their own.
 */
export function instanceSpecs(config: ModelConfig, auto: "CPU" | "GPU" = "CPU"): InstanceSpec[] {
  return config.instanceGroup.flatMap((group) =>
    Array.from({ length: Math.max(1, group.count) }, (_, i) => ({
      name: `${group.name}_${i}`,
      kind:
        group.kind === ModelInstanceGroup_Kind.GPU
          ? "GPU"
          : group.kind === ModelInstanceGroup_Kind.MODEL
            ? "MODEL"
            : group.kind === ModelInstanceGroup_Kind.AUTO
              ? auto
              : "CPU",
      device: group.gpus[i % Math.max(1, group.gpus.length)] ?? 0,
      rateLimiter: group.rateLimiter,
      passive: group.passive,
    })),
  );
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
