import { DataType, type ModelConfig, type ModelEnsembling, type ModelInput, type ModelOutput } from "@galley/proto";
import type { Diagnostic } from "../diagnostic.js";

/** A tensor as one model sees it: dims without batch, and with the batch dimension. */
interface TensorNode {
  model: string;
  dataType: DataType;
  dims: readonly bigint[];
  fullDims: readonly bigint[];
}

/** What {@link validateEnsembleConfig} found. */
export interface EnsembleCheck {
  diagnostics: Diagnostic[];
  /** Whether the ensemble is decoupled: true when a decoupled composing model is reachable. */
  decoupled: boolean;
}

/**
 * Triton's `ValidateEnsembleConfig` (PROTOCOL.md §4.4): the ensemble against the final configs of
 * its composing models — batch sizes, mapped names, data types and shapes consistent across
 * steps (compared with wildcards, with and without the batch dimension), every required input
 * mapped, and no step fed by two different decoupled branches. Also decides whether the ensemble
 * is decoupled, which Triton sets regardless of what the config says.
 *
 * @param composing - the loaded config of each step's model, by model name.
 */
export function validateEnsembleConfig(
  config: ModelConfig,
  ensembling: ModelEnsembling,
  composing: ReadonlyMap<string, ModelConfig>,
): EnsembleCheck {
  const diagnostics: Diagnostic[] = [];
  const e = config.name;
  const add = (path: string, message: string) => diagnostics.push({ path, message });
  const nodes = new Map<string, TensorNode>();
  const node = (model: string, maxBatchSize: number, io: ModelInput | ModelOutput, useReshape: boolean): TensorNode => {
    const dims = useReshape && io.reshape ? io.reshape.shape : io.dims;
    return { model, dataType: io.dataType, dims, fullDims: maxBatchSize > 0 ? [-1n, ...dims] : dims };
  };
  for (const io of config.input) nodes.set(io.name, node(e, config.maxBatchSize, io, true));
  for (const io of config.output) if (!nodes.has(io.name)) nodes.set(io.name, node(e, config.maxBatchSize, io, true));

  const check = (path: string, tensor: string, rhs: TensorNode) => {
    const lhs = nodes.get(tensor);
    if (!lhs) {
      nodes.set(tensor, rhs);
      return;
    }
    const prefix = `in ensemble ${e}, ensemble tensor ${tensor}: `;
    if (lhs.dataType !== rhs.dataType) {
      add(
        path,
        `${prefix}inconsistent data type: ${DataType[lhs.dataType]} is inferred from model ${lhs.model} while ${DataType[rhs.dataType]} is inferred from model ${rhs.model}`,
      );
    } else if (!sameShape(lhs.dims, rhs.dims) && !sameShape(lhs.fullDims, rhs.fullDims)) {
      add(
        path,
        `${prefix}inconsistent shape: ${dimsString(lhs.fullDims)} is inferred from model ${lhs.model} while ${dimsString(rhs.fullDims)} is inferred from model ${rhs.model}`,
      );
    }
  };

  ensembling.step.forEach((step, i) => {
    const path = `ensemble_scheduling.step[${i}]`;
    const model = composing.get(step.modelName);
    if (!model) return;
    const id = step.modelName;
    if (model.maxBatchSize !== 0 && model.maxBatchSize < config.maxBatchSize) {
      add(
        path,
        `ensemble ${e} allows maximum batch size ${config.maxBatchSize}, but it contains model ${id} which only allows maximum batch size to be ${model.maxBatchSize}`,
      );
    }
    const inputs = new Map(model.input.map((io) => [io.name, io]));
    for (const [key, tensor] of Object.entries(step.inputMap)) {
      if (!inputs.has(key)) {
        add(path, `in ensemble ${e}, ensemble tensor ${tensor} is mapping to non-existing input ${key} in model ${id}`);
      }
    }
    for (const io of model.input) {
      const tensor = step.inputMap[io.name];
      if (tensor !== undefined) check(path, tensor, node(id, model.maxBatchSize, io, false));
      else if (!io.optional)
        add(path, `in ensemble ${e}, input ${io.name} in model ${id} is not mapped to any ensemble tensors`);
    }
    const outputs = new Map(model.output.map((io) => [io.name, io]));
    for (const [key, tensor] of Object.entries(step.outputMap)) {
      const io = outputs.get(key);
      if (!io) {
        add(
          path,
          `in ensemble ${e}, ensemble tensor ${tensor} is mapped from non-existing output ${key} in model ${step.modelName}`,
        );
      } else check(path, tensor, node(id, model.maxBatchSize, io, false));
    }
  });

  const { problem, decoupled } = decoupledBranches(config, ensembling, composing);
  if (problem) add("ensemble_scheduling", problem);
  return { diagnostics, decoupled };
}

/**
 * Label each tensor with the decoupled step it descends from (none for the ensemble inputs). A
 * step, or the ensemble's outputs, fed by two different labels is an error.
 */
function decoupledBranches(
  config: ModelConfig,
  ensembling: ModelEnsembling,
  composing: ReadonlyMap<string, ModelConfig>,
): { problem?: string; decoupled: boolean } {
  const NONE = 0;
  const labels = new Map<string, number>(config.input.map((i) => [i.name, NONE]));
  let next = 1;
  let decoupled = false;
  const conflict = (tensors: string[]) =>
    new Set(tensors.map((t) => labels.get(t) ?? NONE).filter((l) => l !== NONE)).size > 1;
  const pending = new Set(ensembling.step.keys());
  for (let progress = true; progress; ) {
    progress = false;
    for (const i of pending) {
      const step = ensembling.step[i];
      if (!step) continue;
      const inputs = Object.values(step.inputMap);
      if (!inputs.every((t) => labels.has(t))) continue;
      pending.delete(i);
      progress = true;
      if (conflict(inputs)) {
        return {
          problem: `in ensemble ${config.name}, step of model '${step.modelName}' receives inputs originated from different decoupled models`,
          decoupled: true,
        };
      }
      const stepDecoupled = composing.get(step.modelName)?.modelTransactionPolicy?.decoupled ?? false;
      const label = stepDecoupled ? next++ : (inputs.map((t) => labels.get(t) ?? NONE).find((l) => l !== NONE) ?? NONE);
      if (stepDecoupled) decoupled = true;
      for (const t of Object.values(step.outputMap)) labels.set(t, label);
    }
  }
  if (conflict(config.output.map((o) => o.name))) {
    return {
      problem: `in ensemble ${config.name}, step of model '${config.name}' receives inputs originated from different decoupled models`,
      decoupled,
    };
  }
  return { decoupled };
}

function sameShape(a: readonly bigint[], b: readonly bigint[]): boolean {
  return a.length === b.length && a.every((d, i) => d === -1n || b[i] === -1n || d === b[i]);
}

/** Triton's `DimsListToString`: `[1,2,-1]`. */
export function dimsString(dims: readonly bigint[]): string {
  return `[${dims.join(",")}]`;
}
