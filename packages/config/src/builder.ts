import {
  create,
  type DescMessage,
  type JsonObject,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  DataType,
  dataTypeFromProtocol,
  type ModelConfig,
  ModelConfigSchema,
  type ModelDynamicBatchingSchema,
  type ModelEnsembling_StepSchema,
  type ModelInput,
  ModelInputSchema,
  type ModelInstanceGroup,
  ModelInstanceGroup_Kind,
  ModelInstanceGroupSchema,
  type ModelOutput,
  ModelOutputSchema,
  type ModelSequenceBatchingSchema,
  type ProtocolDataType,
} from "@galley/proto";
import { toModelConfigJson } from "./json-form.js";
import { printModelConfig } from "./text-format.js";

/** A datatype as `config.pbtxt` spells it (`"TYPE_FP32"`), as the protocol does (`"FP32"`), or the enum. */
export type DataTypeName = Exclude<keyof typeof DataType, "TYPE_INVALID"> | ProtocolDataType | DataType;

/** A {@link ModelConfig} message that also prints itself. */
export type BuiltModelConfig = ModelConfig & {
  /** `config.pbtxt` text. */
  toPbtxt(): string;
  /** Triton's JSON form (see {@link toModelConfigJson}). */
  toJson(): JsonObject;
};

/** The plain-object half of a generated init shape (so that `Omit` can work on it). */
export type InitShape<T extends DescMessage> = Exclude<MessageInitShape<T>, MessageShape<T>>;
/** {@link dynamicBatching}'s argument: the generated shape, with microseconds as number or bigint. */
export type DynamicBatchingInit = Omit<InitShape<typeof ModelDynamicBatchingSchema>, "maxQueueDelayMicroseconds"> & {
  maxQueueDelayMicroseconds?: number | bigint;
};
/** {@link sequenceBatching}'s argument: the generated shape, with microseconds as number or bigint. */
export type SequenceBatchingInit = Omit<
  InitShape<typeof ModelSequenceBatchingSchema>,
  "maxSequenceIdleMicroseconds"
> & {
  maxSequenceIdleMicroseconds?: number | bigint;
};

/** What {@link modelConfig} takes: the generated init shape, with the scheduler as a plain key. */
export type ModelConfigInit = Omit<InitShape<typeof ModelConfigSchema>, "schedulingChoice"> & {
  dynamicBatching?: DynamicBatchingInit;
  sequenceBatching?: SequenceBatchingInit;
};

/** The thrown error when a config cannot be built. */
export class ConfigBuildError extends Error {
  override name = "ConfigBuildError";
}

/**
 * Build a model configuration. Takes the generated init shape (camelCase fields) plus
 * `dynamicBatching` / `sequenceBatching` as plain keys; at most one scheduler may be given.
 *
 * @example
 * const config = modelConfig({
 *   name: "simple",
 *   backend: "onnxruntime",
 *   maxBatchSize: 8,
 *   input: [input("INPUT0", "TYPE_INT32", [16])],
 *   output: [output("OUTPUT0", "TYPE_INT32", [16])],
 *   dynamicBatching: dynamicBatching({ maxQueueDelayMicroseconds: 100 }),
 * });
 * config.toPbtxt();
 */
export function modelConfig(init: ModelConfigInit): BuiltModelConfig {
  const { dynamicBatching: dynamic, sequenceBatching: sequence, ...rest } = init;
  if (dynamic && sequence)
    throw new ConfigBuildError("a model config takes one scheduler: dynamicBatching or sequenceBatching");
  const schedulingChoice = dynamic
    ? ({ case: "dynamicBatching", value: dynamicBatching(dynamic) } as const)
    : sequence
      ? ({ case: "sequenceBatching", value: sequenceBatching(sequence) } as const)
      : undefined;
  return withPrinters(create(ModelConfigSchema, schedulingChoice ? { ...rest, schedulingChoice } : rest));
}

/**
 * A model input. `dims` leave out the batch dimension when `max_batch_size > 0`; -1 marks a
 * variable size.
 *
 * @example
 * input("INPUT0", "TYPE_FP32", [3, -1, -1], { format: ModelInput_Format.FORMAT_NCHW })
 */
export function input(
  name: string,
  dataType: DataTypeName,
  dims: readonly (number | bigint)[],
  options: Omit<InitShape<typeof ModelInputSchema>, "name" | "dataType" | "dims"> = {},
): ModelInput {
  return create(ModelInputSchema, { ...options, name, dataType: toDataType(dataType), dims: dims.map(BigInt) });
}

/** A model output; see {@link input}. */
export function output(
  name: string,
  dataType: DataTypeName,
  dims: readonly (number | bigint)[],
  options: Omit<InitShape<typeof ModelOutputSchema>, "name" | "dataType" | "dims"> = {},
): ModelOutput {
  return create(ModelOutputSchema, { ...options, name, dataType: toDataType(dataType), dims: dims.map(BigInt) });
}

/**
 * Dynamic batching settings (plain numbers accepted for microseconds).
 *
 * @example
 * dynamicBatching({ preferredBatchSize: [4, 8], maxQueueDelayMicroseconds: 100 })
 */
export function dynamicBatching(init: DynamicBatchingInit = {}): InitShape<typeof ModelDynamicBatchingSchema> {
  const { maxQueueDelayMicroseconds, ...rest } = init;
  return maxQueueDelayMicroseconds === undefined
    ? rest
    : { ...rest, maxQueueDelayMicroseconds: BigInt(maxQueueDelayMicroseconds) };
}

/** Sequence batching settings (plain numbers accepted for microseconds). */
export function sequenceBatching(init: SequenceBatchingInit = {}): InitShape<typeof ModelSequenceBatchingSchema> {
  const { maxSequenceIdleMicroseconds, ...rest } = init;
  return maxSequenceIdleMicroseconds === undefined
    ? rest
    : { ...rest, maxSequenceIdleMicroseconds: BigInt(maxSequenceIdleMicroseconds) };
}

/**
 * An instance group; `kind` may be written `"KIND_CPU"` / `"CPU"`.
 *
 * @example
 * instanceGroup({ kind: "KIND_CPU", count: 2 })
 */
export function instanceGroup(
  init: Omit<InitShape<typeof ModelInstanceGroupSchema>, "kind"> & {
    kind?:
      | ModelInstanceGroup_Kind
      | `KIND_${keyof typeof ModelInstanceGroup_Kind}`
      | keyof typeof ModelInstanceGroup_Kind;
  } = {},
): ModelInstanceGroup {
  const { kind, ...rest } = init;
  return create(ModelInstanceGroupSchema, { ...rest, kind: toKind(kind) });
}

/** One ensemble step: which model, and how its tensors map to ensemble tensors. */
export interface EnsembleStep {
  model: string;
  /** -1 (the default) runs the latest version. */
  version?: number;
  /** Model input name → ensemble tensor name. */
  inputs: Record<string, string>;
  /** Model output name → ensemble tensor name. */
  outputs: Record<string, string>;
}

/**
 * An ensemble step (see {@link ensemble}).
 *
 * @example
 * step("preprocess", { inputs: { RAW: "IMAGE" }, outputs: { TENSOR: "preprocessed" } })
 */
export function step(model: string, init: Omit<EnsembleStep, "model">): EnsembleStep {
  return { model, ...init };
}

/**
 * Build an ensemble (`platform: "ensemble"`) and check its graph now rather than at load: every
 * ensemble tensor is produced exactly once, every step input is an ensemble input or produced by
 * another step, every ensemble output is produced, every ensemble input is used, and there are no
 * cycles. Steps may be listed in any order, as in Triton.
 *
 * @throws {@link ConfigBuildError} listing every problem found.
 */
export function ensemble(
  init: Omit<
    ModelConfigInit,
    "platform" | "backend" | "dynamicBatching" | "sequenceBatching" | "ensembleScheduling"
  > & {
    steps: EnsembleStep[];
  },
): BuiltModelConfig {
  const { steps, ...rest } = init;
  const problems = checkEnsembleGraph(
    (rest.input ?? []).map((i) => String(i.name)),
    (rest.output ?? []).map((o) => String(o.name)),
    steps,
  );
  if (problems.length > 0) {
    throw new ConfigBuildError(`ensemble '${rest.name ?? ""}' is invalid:\n  - ${problems.join("\n  - ")}`);
  }
  const stepInit: InitShape<typeof ModelEnsembling_StepSchema>[] = steps.map((s) => ({
    modelName: s.model,
    modelVersion: BigInt(s.version ?? -1),
    inputMap: s.inputs,
    outputMap: s.outputs,
  }));
  return withPrinters(
    create(ModelConfigSchema, {
      ...rest,
      platform: "ensemble",
      schedulingChoice: { case: "ensembleScheduling", value: { step: stepInit } },
    }),
  );
}

/** The graph rules {@link ensemble} enforces; each problem is one sentence. */
export function checkEnsembleGraph(inputs: string[], outputs: string[], steps: EnsembleStep[]): string[] {
  const problems: string[] = [];
  const producer = new Map<string, number>();
  for (const name of inputs) producer.set(name, -1);
  steps.forEach((s, i) => {
    if (Object.keys(s.inputs).length === 0) problems.push(`step ${i} (${s.model}) has no inputs`);
    if (Object.keys(s.outputs).length === 0) problems.push(`step ${i} (${s.model}) has no outputs`);
    for (const tensor of Object.values(s.outputs)) {
      const earlier = producer.get(tensor);
      if (earlier === -1) problems.push(`step ${i} (${s.model}) writes ensemble input '${tensor}'`);
      else if (earlier !== undefined)
        problems.push(`ensemble tensor '${tensor}' is produced by steps ${earlier} and ${i}`);
      else producer.set(tensor, i);
    }
  });
  steps.forEach((s, i) => {
    for (const tensor of Object.values(s.inputs)) {
      if (!producer.has(tensor)) problems.push(`step ${i} (${s.model}) reads '${tensor}', which nothing produces`);
    }
  });
  for (const name of outputs)
    if (!producer.has(name)) problems.push(`ensemble output '${name}' is not produced by any step`);
  const consumed = new Set(steps.flatMap((s) => Object.values(s.inputs)));
  for (const name of inputs) if (!consumed.has(name)) problems.push(`ensemble input '${name}' is not used by any step`);
  const cycle = findCycle(steps, producer);
  if (cycle) problems.push(`steps form a cycle: ${cycle.map((i) => `${i} (${steps[i]?.model})`).join(" -> ")}`);
  return problems;
}

/** A cycle among steps (step j depends on step i when j reads a tensor i writes), if any. */
function findCycle(steps: EnsembleStep[], producer: Map<string, number>): number[] | undefined {
  const state = new Array<"new" | "active" | "done">(steps.length).fill("new");
  const path: number[] = [];
  const visit = (i: number): number[] | undefined => {
    state[i] = "active";
    path.push(i);
    for (const tensor of Object.values(steps[i]?.inputs ?? {})) {
      const from = producer.get(tensor);
      if (from === undefined || from < 0) continue;
      if (state[from] === "active") return [...path.slice(path.indexOf(from)), from];
      if (state[from] === "new") {
        const found = visit(from);
        if (found) return found;
      }
    }
    path.pop();
    state[i] = "done";
    return undefined;
  };
  for (let i = 0; i < steps.length; i++) {
    if (state[i] === "new") {
      const found = visit(i);
      if (found) return found;
    }
  }
  return undefined;
}

function withPrinters(config: ModelConfig): BuiltModelConfig {
  Object.defineProperties(config, {
    toPbtxt: { value: () => printModelConfig(config), enumerable: false },
    toJson: { value: () => toModelConfigJson(config), enumerable: false },
  });
  return config as BuiltModelConfig;
}

function toDataType(type: DataTypeName): DataType {
  if (typeof type === "number") return type;
  const value = type.startsWith("TYPE_") ? DataType[type as keyof typeof DataType] : dataTypeFromProtocol(type);
  if (value === undefined || value === DataType.TYPE_INVALID) throw new ConfigBuildError(`unknown data type '${type}'`);
  return value;
}

function toKind(kind: ModelInstanceGroup_Kind | string | undefined): ModelInstanceGroup_Kind {
  if (kind === undefined) return ModelInstanceGroup_Kind.AUTO;
  if (typeof kind === "number") return kind;
  const value = ModelInstanceGroup_Kind[kind.replace(/^KIND_/, "") as keyof typeof ModelInstanceGroup_Kind];
  if (value === undefined) throw new ConfigBuildError(`unknown instance group kind '${kind}'`);
  return value;
}
