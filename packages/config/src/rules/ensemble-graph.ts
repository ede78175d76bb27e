import type { ModelConfig, ModelEnsembling } from "@galley/proto";
import type { Diagnostic } from "../diagnostic.js";
import { Platform } from "./platforms.js";

/**
 * Triton's `ValidateEnsembleSchedulingConfig` (PROTOCOL.md §4.4, static checks): no instance
 * groups, optimization or warmup; steps well formed; each tensor written once; every ensemble
 * input used; every ensemble output written (cycles never become ready, so they fail here); every
 * intermediate tensor consumed.
 */
export function validateEnsembleScheduling(config: ModelConfig, ensembling: ModelEnsembling): Diagnostic[] {
  const out: Diagnostic[] = [];
  const e = config.name;
  const add = (path: string, message: string) => out.push({ path, message });
  if (config.platform !== Platform.ensemble) {
    add("ensemble_scheduling", `ensemble scheduling cannot be set for model '${e}' whose platform is not ensemble`);
    return out;
  }
  if (config.instanceGroup.length > 0)
    add("instance_group", `instance group should not be specified for ensemble '${e}'`);
  if (config.optimization) add("optimization", `optimization should not be specified for ensemble '${e}'`);
  if (config.modelWarmup.length > 0) add("model_warmup", `model_warmup can not be specified for ensemble '${e}'`);
  if (ensembling.step.length === 0) {
    add("ensemble_scheduling.step", `must specify 'step' for ensemble '${e}'`);
    return out;
  }

  const producers = new Map<string, number>();
  const consumers = new Map<string, number[]>();
  let wellFormed = true;
  ensembling.step.forEach((step, i) => {
    const path = `ensemble_scheduling.step[${i}]`;
    if (step.modelName === "") add(path, `must specify 'model_name' in step ${i} of ensemble '${e}'`);
    const inputs = Object.values(step.inputMap);
    const outputs = Object.values(step.outputMap);
    if (inputs.length === 0) add(path, `must specify 'input_map' in step ${i} of ensemble '${e}'`);
    if (outputs.length === 0) add(path, `must specify 'output_map' in step ${i} of ensemble '${e}'`);
    if (step.modelName === "" || inputs.length === 0 || outputs.length === 0) wellFormed = false;
    for (const tensor of outputs) {
      if (producers.has(tensor)) {
        add(path, `ensemble tensor '${tensor}' can appear in an output map only once for ensemble '${e}' step ${i}`);
        wellFormed = false;
      } else producers.set(tensor, i);
    }
    for (const tensor of inputs) consumers.set(tensor, [...(consumers.get(tensor) ?? []), i]);
  });
  if (!wellFormed) return out;

  const inGraph = (t: string) => producers.has(t) || consumers.has(t);
  for (const input of config.input) {
    if (!inGraph(input.name)) add("input", `ensemble input '${input.name}' for ensemble ${e}' is not used`);
  }
  const ready = readyTensors(config, ensembling);
  const outputs = new Set(config.output.map((o) => o.name));
  for (const output of config.output) {
    if (!inGraph(output.name)) {
      add("output", `ensemble output '${output.name}' for ensemble ${e}' is not used`);
    } else if (!ready.has(output.name)) {
      const unconnected = firstUnconnected(output.name, ensembling, producers, ready);
      add(
        "output",
        `output '${output.name}' for ensemble '${e}' is not written${
          unconnected ? `: at least one of its depending tensors, '${unconnected}', is not connected` : ""
        }`,
      );
    }
  }
  const inputs = new Set(config.input.map((i) => i.name));
  for (const tensor of new Set([...producers.keys(), ...consumers.keys()])) {
    if (outputs.has(tensor) || inputs.has(tensor)) continue;
    if (!ready.has(tensor) || !consumers.has(tensor)) {
      add("ensemble_scheduling", `ensemble tensor '${tensor}' is unused in ensemble '${e}'`);
    }
  }
  return out;
}

/** Tensors that become available when the ensemble inputs are: a step runs once all its inputs are. */
export function readyTensors(config: ModelConfig, ensembling: ModelEnsembling): Set<string> {
  const ready = new Set(config.input.map((i) => i.name));
  const pending = new Set(ensembling.step.keys());
  for (let progress = true; progress; ) {
    progress = false;
    for (const i of pending) {
      const step = ensembling.step[i];
      if (!step || !Object.values(step.inputMap).every((t) => ready.has(t))) continue;
      for (const t of Object.values(step.outputMap)) ready.add(t);
      pending.delete(i);
      progress = true;
    }
  }
  return ready;
}

/** Follow not-ready inputs upstream from `tensor` to one that nothing produces. */
function firstUnconnected(
  tensor: string,
  ensembling: ModelEnsembling,
  producers: Map<string, number>,
  ready: Set<string>,
): string | undefined {
  const seen = new Set<string>();
  let current = tensor;
  while (!seen.has(current)) {
    seen.add(current);
    const producer = producers.get(current);
    if (producer === undefined) return current === tensor ? undefined : current;
    const next = Object.values(ensembling.step[producer]?.inputMap ?? {}).find((t) => !ready.has(t));
    if (next === undefined) return undefined;
    current = next;
  }
  return undefined;
}
