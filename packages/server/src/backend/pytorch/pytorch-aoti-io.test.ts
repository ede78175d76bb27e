import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { aotiSignature, mapAotiIO } from "./pytorch-aoti-io.js";

const leaf = { type: null, context: null, children_spec: [] };
const node = (type: string, children: unknown[], keys?: string[]) => ({
  type,
  context: JSON.stringify(keys ?? null),
  children_spec: children,
});
const spec = (value: unknown) => JSON.stringify([1, value]);
/** forward(a, b, *, n) -> {"sum": t, "pair": (t, t), "count": t}, as torch 2.13 writes it. */
const TYPES = [
  spec(node("builtins.tuple", [node("builtins.tuple", [leaf, leaf]), node("builtins.dict", [leaf], ["n"])])),
  spec(node("builtins.dict", [leaf, node("builtins.tuple", [leaf, leaf]), leaf], ["sum", "pair", "count"])),
];
const SINGLE = [
  spec(node("builtins.tuple", [node("builtins.tuple", [leaf]), node("builtins.dict", [], [])])),
  spec(leaf),
];

function config(inputs: string[], outputs: string[]) {
  const tensor = (name: string) => ({ name, dataType: DataType.TYPE_FP32, dims: [4n] });
  return create(ModelConfigSchema, { name: "m", input: inputs.map(tensor), output: outputs.map(tensor) });
}

describe("aotiSignature", () => {
  it("names inputs ARGS[i] / KWARGS[key] and outputs RESULT[...] in flattening order", () => {
    expect(aotiSignature(TYPES)).toEqual({
      inputs: ["ARGS[0]", "ARGS[1]", "KWARGS[n]"],
      outputs: ["RESULT[sum]", "RESULT[pair][0]", "RESULT[pair][1]", "RESULT[count]"],
    });
    expect(aotiSignature(SINGLE)).toEqual({ inputs: ["ARGS[0]"], outputs: ["RESULT"] });
  });

  it("refuses structures other than tensors, tuples, lists and dicts, and malformed specs", () => {
    const custom = [
      spec(node("builtins.tuple", [node("builtins.tuple", [node("my.Point", [leaf])]), node("builtins.dict", [], [])])),
      spec(leaf),
    ];
    expect(() => aotiSignature(custom)).toThrow(
      "the package's input at [0][0] is a 'my.Point': only tensors, tuples, lists and dicts of tensors are supported",
    );
    expect(() => aotiSignature(["{", spec(leaf)])).toThrow(/failed to parse the package's input call spec/);
    expect(() => aotiSignature([spec(leaf)])).toThrow(
      "the package's call spec has 1 part(s), expected 2 (inputs and outputs)",
    );
  });
});

describe("mapAotiIO", () => {
  const warn = () => {};
  it("places names of the call spec and <name>__<index> names, mixed", () => {
    const io = mapAotiIO(
      config(["KWARGS[n]", "INPUT__1", "ARGS[0]"], ["RESULT[count]", "OUTPUT__0", "RESULT[pair][1]"]),
      TYPES,
      warn,
    );
    expect([...io.inputs]).toEqual([
      ["KWARGS[n]", 2],
      ["INPUT__1", 1],
      ["ARGS[0]", 0],
    ]);
    expect([...io.outputs]).toEqual([
      ["RESULT[count]", 3],
      ["OUTPUT__0", 0],
      ["RESULT[pair][1]", 2],
    ]);
    expect(io.returnCount).toBe(4);
  });

  it("falls back to the config's order with a warning, and refuses counts and indexes that do not fit", () => {
    const warnings: string[] = [];
    const io = mapAotiIO(config(["a", "b", "c"], ["x"]), TYPES, (m) => warnings.push(m));
    expect([...io.inputs.values()]).toEqual([0, 1, 2]);
    expect(warnings[0]).toMatch(/input 'a' of the model 'm' is neither one of the package's inputs/);
    expect(() => mapAotiIO(config(["a"], ["x"]), TYPES, warn)).toThrow(
      "configuration expects 1 inputs, model provides 3 (ARGS[0], ARGS[1], KWARGS[n])",
    );
    expect(() => mapAotiIO(config(["INPUT__0", "INPUT__1", "INPUT__7"], ["RESULT"]), TYPES, warn)).toThrow(
      "input 'INPUT__7' refers to input 7, but the package takes 3",
    );
    expect(() => mapAotiIO(config(["ARGS[0]", "ARGS[1]", "INPUT__0"], ["RESULT[sum]"]), TYPES, warn)).toThrow(
      "inputs 'ARGS[0]' and 'INPUT__0' both refer to the package's input 0 (ARGS[0])",
    );
    expect(() => mapAotiIO(config(["ARGS[0]"], ["OUTPUT__1"]), SINGLE, warn)).toThrow(
      "The output OUTPUT__1 in the model configuration refers to an output index which doesn't exist. This model has 1 outputs",
    );
  });
});
