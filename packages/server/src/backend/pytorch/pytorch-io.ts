// Triton's PyTorch backend naming conventions: which forward argument each input feeds, and which
// returned tensor each output is, decided once at load from the config and the module's forward.
import { dataTypeToProtocol } from "@galley/config";
import type { DataType, ModelConfig } from "@galley/proto";

/** What the loaded model reports: forward's arguments (without self) and return type, or a package's call spec. */
export interface ForwardSignature {
  /** `aoti` for an AOTInductor package (see `mapAotiIO`); TorchScript when absent. */
  format?: "torchscript" | "aoti";
  arguments: readonly { name: string; type: string }[];
  returns: string;
  /** AOTInductor: `[inputs, outputs]` call spec, PyTorch's pytree JSON. */
  callSpec?: readonly string[];
  /** AOTInductor: the package's metadata. */
  metadata?: Readonly<Record<string, string>>;
}

/** How a config's tensors meet forward (see `mapTorchIO`). */
export interface TorchIO {
  /** Input name (config inputs, sequence controls and states) → forward argument position. */
  readonly inputs: ReadonlyMap<string, number>;
  /** forward's arguments, in order. */
  readonly arguments: readonly string[];
  /** Output name (config outputs and sequence states) → position in what forward returns. */
  readonly outputs: ReadonlyMap<string, number>;
  /** How many tensors forward returns, when its type says (a tuple or a tensor); undefined for a list. */
  readonly returnCount: number | undefined;
}

/** The protocol datatypes libtorch has here. */
export const TORCH_PROTOCOL_TYPES: ReadonlySet<string> = new Set([
  "BOOL",
  "UINT8",
  "INT8",
  "INT16",
  "INT32",
  "INT64",
  "FP16",
  "BF16",
  "FP32",
  "FP64",
]);

export const NAMED_INDEX = /__(\d+)$/;

/**
 * Map the config's inputs to forward's arguments and its outputs to the returned tensors, with
 * Triton's rules: inputs by forward's argument names when every input is one; else by
 * `<name>__<index>` when every input follows it; else in config order (with a warning). Outputs by
 * `<name>__<index>`, else in config order. Sequence controls and states must follow
 * `<name>__<index>`. Throws Triton's message (or ours where Triton only fails at run time) on a
 * mismatch: a count that differs from forward's, an index past its arguments or its outputs, an
 * unsupported datatype, an argument that is not a tensor.
 */
export function mapTorchIO(config: ModelConfig, forward: ForwardSignature, warn: (message: string) => void): TorchIO {
  const model = config.name;
  for (const argument of forward.arguments) {
    if (argument.type !== "Tensor") {
      throw new Error(
        `An input of type '${argument.type}' was detected in the model. Only input(s) of type Tensor are supported.`,
      );
    }
  }
  const argumentNames = forward.arguments.map((a) => a.name);
  const sequence = config.schedulingChoice.case === "sequenceBatching" ? config.schedulingChoice.value : undefined;
  const controls = (sequence?.controlInput ?? []).map((c) => c.name);
  const states = sequence?.state ?? [];
  const expected = config.input.length + controls.length + states.length;
  if (forward.arguments.length !== expected) {
    throw new Error(`configuration expects ${expected} inputs, model provides ${forward.arguments.length}`);
  }
  for (const input of config.input) checkType(input.dataType, `input '${input.name}'`, model);
  for (const output of config.output) checkType(output.dataType, `output '${output.name}'`, model);
  for (const state of states) checkType(state.dataType, `state '${state.inputName}'`, model);

  const names = config.input.map((i) => i.name);
  const inputs = new Map<string, number>();
  if (names.every((n) => argumentNames.includes(n))) {
    for (const n of names) inputs.set(n, argumentNames.indexOf(n));
  } else if (names.every((n) => NAMED_INDEX.test(n))) {
    for (const n of names) inputs.set(n, namedIndex(n));
  } else {
    warn(
      `input '${names.find((n) => !NAMED_INDEX.test(n))}' or previous input(s) are neither an input argument to the model '${model}' nor do they follow the <name>__<index> naming convention. Falling back to enforcing strict ordering from model configuration.`,
    );
    for (const [i, n] of names.entries()) inputs.set(n, i);
  }
  for (const name of [...controls, ...states.map((s) => s.inputName)]) {
    if (!NAMED_INDEX.test(name)) throw new Error(`input '${name}' does not follow <name>__<index> naming convention.`);
    inputs.set(name, namedIndex(name));
  }
  const taken = new Map<number, string>();
  for (const [name, index] of inputs) {
    if (index >= forward.arguments.length) {
      throw new Error(
        `input '${name}' refers to forward argument ${index}, but the model's forward takes ${forward.arguments.length} argument(s)`,
      );
    }
    const other = taken.get(index);
    if (other !== undefined) throw new Error(`inputs '${other}' and '${name}' both refer to forward argument ${index}`);
    taken.set(index, name);
  }

  const returnCount = countReturns(forward.returns);
  const outputNames = config.output.map((o) => o.name);
  const outputs = new Map<string, number>();
  if (outputNames.every((n) => NAMED_INDEX.test(n))) {
    for (const n of outputNames) outputs.set(n, namedIndex(n));
  } else {
    warn(
      `output '${outputNames.find((n) => !NAMED_INDEX.test(n))}' or previous output(s) of the model '${model}' do not follow the <name>__<index> naming convention. Falling back to enforcing strict ordering from model configuration.`,
    );
    for (const [i, n] of outputNames.entries()) outputs.set(n, i);
  }
  for (const state of states) {
    if (!NAMED_INDEX.test(state.outputName)) {
      throw new Error(
        `PyTorch model '${model}' is using sequence batching with state but state '${state.outputName}' does not follow the <name>__<index> naming convention. `,
      );
    }
    outputs.set(state.outputName, namedIndex(state.outputName));
  }
  if (returnCount !== undefined) {
    for (const [name, index] of outputs) {
      if (index >= returnCount) throw new Error(outputIndexMessage(name, returnCount));
    }
  }
  return { inputs, arguments: argumentNames, outputs, returnCount };
}

/** Triton's message for an output whose index is past what the model returns. */
export function outputIndexMessage(output: string, count: number): string {
  return `The output ${output} in the model configuration refers to an output index which doesn't exist. This model has ${count} outputs`;
}

export function namedIndex(name: string): number {
  return Number(NAMED_INDEX.exec(name)?.[1]);
}

export function checkType(type: DataType, what: string, model: string): void {
  const protocol = dataTypeToProtocol(type);
  if (!TORCH_PROTOCOL_TYPES.has(protocol)) {
    throw new Error(
      `unsupported datatype TYPE_${protocol === "BYTES" ? "STRING" : protocol} for ${what} for model '${model}'`,
    );
  }
}

/**
 * How many tensors a TorchScript return type holds: 1 for `Tensor`, n for a tuple `(Tensor, ...)`
 * or `Tuple[Tensor, ...]`, undefined for a list (known only at run time) or anything else.
 */
export function countReturns(type: string): number | undefined {
  if (type === "Tensor") return 1;
  let inner: string | undefined;
  if (type.startsWith("(") && type.endsWith(")")) inner = type.slice(1, -1);
  else if (type.startsWith("Tuple[") && type.endsWith("]")) inner = type.slice(6, -1);
  if (inner === undefined) return undefined;
  let depth = 0;
  let count = inner.trim() === "" ? 0 : 1;
  for (const c of inner) {
    if (c === "(" || c === "[") depth++;
    else if (c === ")" || c === "]") depth--;
    else if (c === "," && depth === 0) count++;
  }
  return count;
}
