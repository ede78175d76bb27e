// Triton's naming rules for AOTInductor packages (`platform: "torch_aoti"`): the package's call
// spec (PyTorch's pytree of forward's `(args, kwargs)` and of what it returns) gives each input and
// output tensor a position and a name, `ARGS[0]`, `ARGS[2][key]`, `KWARGS[key]`, `RESULT`,
// `RESULT[key][0]`; a config may use those names or `<name>__<index>` positions.
import type { ModelConfig } from "@galley/proto";
import { checkType, NAMED_INDEX, namedIndex, outputIndexMessage, type TorchIO } from "./pytorch-io.js";

/** One node of a pytree spec: a leaf (a tensor) or a tuple, list or dict of nodes. */
interface SpecNode {
  kind: "leaf" | "sequence" | "dict";
  keys: string[];
  children: SpecNode[];
}

const SEQUENCES = new Set(["builtins.tuple", "builtins.list"]);
const DICTS = new Set(["builtins.dict", "collections.OrderedDict"]);

/**
 * Parse one side of a package's call spec: `[1, {"type": ..., "context": ..., "children_spec": [...]}]`
 * (a leaf has type null; a dict's context is its keys as a JSON string). Throws saying what is not
 * supported: only tensors, tuples, lists and dicts of them, as in Triton.
 */
export function parseCallSpec(text: string, what: string): SpecNode {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`failed to parse the package's ${what} call spec: ${(error as Error).message}`);
  }
  if (!Array.isArray(json) || json.length !== 2 || json[0] !== 1) {
    throw new Error(`failed to parse the package's ${what} call spec: expected [1, spec], got ${text.slice(0, 200)}`);
  }
  const node = (value: unknown, at: string): SpecNode => {
    if (typeof value !== "object" || value === null)
      throw new Error(`failed to parse the package's ${what} call spec at ${at}`);
    const { type, context, children_spec: children } = value as Record<string, unknown>;
    const list = Array.isArray(children) ? children : [];
    if (type === null || type === undefined) return { kind: "leaf", keys: [], children: [] };
    if (typeof type === "string" && SEQUENCES.has(type)) {
      return { kind: "sequence", keys: [], children: list.map((c, i) => node(c, `${at}[${i}]`)) };
    }
    if (typeof type === "string" && DICTS.has(type)) {
      const keys: unknown = typeof context === "string" ? JSON.parse(context) : context;
      if (!Array.isArray(keys) || keys.length !== list.length) {
        throw new Error(
          `failed to parse the package's ${what} call spec at ${at}: a dict's keys do not match its values`,
        );
      }
      return {
        kind: "dict",
        keys: keys.map(String),
        children: list.map((c, i) => node(c, `${at}[${String(keys[i])}]`)),
      };
    }
    throw new Error(
      `the package's ${what} at ${at === "" ? "the top" : at} is a '${String(type)}': only tensors, tuples, lists and dicts of tensors are supported`,
    );
  };
  return node(json[1], "");
}

/** The leaves' names below a node, in flattening order (`[0]`, `[key][1]`); [""] for a leaf. */
function leafNames(node: SpecNode): string[] {
  if (node.kind === "leaf") return [""];
  return node.children.flatMap((child, i) =>
    leafNames(child).map((rest) => `[${node.kind === "dict" ? node.keys[i] : String(i)}]${rest}`),
  );
}

/** A package's tensors by name, in the order it takes and returns them. */
export interface AotiSignature {
  /** `ARGS[...]` then `KWARGS[...]`. */
  inputs: string[];
  /** `RESULT` for a single tensor, else `RESULT[...]`. */
  outputs: string[];
}

/** The names Triton gives a package's inputs and outputs, from its call spec `[inputs, outputs]`. */
export function aotiSignature(callSpec: readonly string[]): AotiSignature {
  const [inputText, outputText] = callSpec;
  if (inputText === undefined || outputText === undefined) {
    throw new Error(`the package's call spec has ${callSpec.length} part(s), expected 2 (inputs and outputs)`);
  }
  const input = parseCallSpec(inputText, "input");
  const [args, kwargs] = input.children;
  if (
    input.kind !== "sequence" ||
    input.children.length !== 2 ||
    args?.kind !== "sequence" ||
    kwargs?.kind !== "dict"
  ) {
    throw new Error("the package's input call spec is not (args, kwargs)");
  }
  const output = parseCallSpec(outputText, "output");
  return {
    inputs: [...leafNames(args).map((n) => `ARGS${n}`), ...leafNames(kwargs).map((n) => `KWARGS${n}`)],
    outputs: leafNames(output).map((n) => `RESULT${n}`),
  };
}

/**
 * Map the config's inputs and outputs onto a package's tensors, Triton's way: by the call spec's
 * names (`ARGS[0]`, `KWARGS[key]`, `RESULT[key]`) or by `<name>__<index>` (`INPUT__0`,
 * `OUTPUT__1`: the position in the flattened call spec), each name either way; when some name is
 * neither, in config order (with a warning). Sequence controls and states use `<name>__<index>`.
 */
export function mapAotiIO(config: ModelConfig, callSpec: readonly string[], warn: (message: string) => void): TorchIO {
  const model = config.name;
  const signature = aotiSignature(callSpec);
  const sequence = config.schedulingChoice.case === "sequenceBatching" ? config.schedulingChoice.value : undefined;
  const controls = (sequence?.controlInput ?? []).map((c) => c.name);
  const states = sequence?.state ?? [];
  const expected = config.input.length + controls.length + states.length;
  if (signature.inputs.length !== expected) {
    throw new Error(
      `configuration expects ${expected} inputs, model provides ${signature.inputs.length} (${signature.inputs.join(", ")})`,
    );
  }
  for (const input of config.input) checkType(input.dataType, `input '${input.name}'`, model);
  for (const output of config.output) checkType(output.dataType, `output '${output.name}'`, model);
  for (const state of states) checkType(state.dataType, `state '${state.inputName}'`, model);

  const place = (names: readonly string[], spec: readonly string[], kind: "input" | "output"): Map<string, number> => {
    const placed = new Map<string, number>();
    const resolve = (n: string) =>
      spec.includes(n) ? spec.indexOf(n) : NAMED_INDEX.test(n) ? namedIndex(n) : undefined;
    const stray = names.find((n) => resolve(n) === undefined);
    if (stray === undefined) {
      for (const n of names) placed.set(n, resolve(n) as number);
    } else {
      warn(
        `${kind} '${stray}' of the model '${model}' is neither one of the package's ${kind}s (${spec.join(", ")}) nor follows the <name>__<index> naming convention. Falling back to enforcing strict ordering from model configuration.`,
      );
      for (const [i, n] of names.entries()) placed.set(n, i);
    }
    return placed;
  };
  const inputs = place(
    config.input.map((i) => i.name),
    signature.inputs,
    "input",
  );
  for (const name of [...controls, ...states.map((s) => s.inputName)]) {
    if (!NAMED_INDEX.test(name)) throw new Error(`input '${name}' does not follow <name>__<index> naming convention.`);
    inputs.set(name, namedIndex(name));
  }
  const taken = new Map<number, string>();
  for (const [name, index] of inputs) {
    if (index >= signature.inputs.length) {
      throw new Error(`input '${name}' refers to input ${index}, but the package takes ${signature.inputs.length}`);
    }
    const other = taken.get(index);
    if (other !== undefined) {
      throw new Error(
        `inputs '${other}' and '${name}' both refer to the package's input ${index} (${signature.inputs[index]})`,
      );
    }
    taken.set(index, name);
  }
  const outputs = place(
    config.output.map((o) => o.name),
    signature.outputs,
    "output",
  );
  for (const state of states) {
    if (!NAMED_INDEX.test(state.outputName)) {
      throw new Error(
        `PyTorch model '${model}' is using sequence batching with state but state '${state.outputName}' does not follow the <name>__<index> naming convention. `,
      );
    }
    outputs.set(state.outputName, namedIndex(state.outputName));
  }
  for (const [name, index] of outputs) {
    if (index >= signature.outputs.length) throw new Error(outputIndexMessage(name, signature.outputs.length));
  }
  return { inputs, arguments: signature.inputs, outputs, returnCount: signature.outputs.length };
}
