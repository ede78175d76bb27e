import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInputSchema, ModelOutputSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { countReturns, mapTorchIO } from "./pytorch-io.js";

const config = (inputs: string[], outputs: string[], type = DataType.TYPE_FP32) =>
  create(ModelConfigSchema, {
    name: "m",
    input: inputs.map((name) => create(ModelInputSchema, { name, dataType: type, dims: [4n] })),
    output: outputs.map((name) => create(ModelOutputSchema, { name, dataType: type, dims: [4n] })),
  });
const forward = (names: string[], returns = "(Tensor, Tensor)") => ({
  arguments: names.map((name) => ({ name, type: "Tensor" })),
  returns,
});

describe("mapTorchIO", () => {
  it("prefers forward's argument names, then NAME__<i>, then the config's order (with a warning)", () => {
    const warnings: string[] = [];
    const warn = (m: string) => warnings.push(m);
    expect([...mapTorchIO(config(["b", "a"], ["O__1"]), forward(["a", "b"]), warn).inputs]).toEqual([
      ["b", 1],
      ["a", 0],
    ]);
    expect([...mapTorchIO(config(["I__1", "I__0"], ["O__0"]), forward(["a", "b"]), warn).inputs]).toEqual([
      ["I__1", 1],
      ["I__0", 0],
    ]);
    expect(warnings).toEqual([]);
    const io = mapTorchIO(config(["P", "Q"], ["X", "Y"]), forward(["a", "b"]), warn);
    expect([...io.inputs]).toEqual([
      ["P", 0],
      ["Q", 1],
    ]);
    expect([...io.outputs]).toEqual([
      ["X", 0],
      ["Y", 1],
    ]);
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toContain("input 'P' or previous input(s) are neither an input argument to the model 'm'");
  });

  it("refuses what does not fit forward, with Triton's words", () => {
    const warn = () => undefined;
    expect(() => mapTorchIO(config(["a"], ["O__0"]), forward(["a", "b"]), warn)).toThrow(
      "configuration expects 1 inputs, model provides 2",
    );
    expect(() => mapTorchIO(config(["I__0", "I__0x"], ["O__0"]), forward(["a", "b"]), warn)).not.toThrow();
    expect(() => mapTorchIO(config(["I__0", "J__0"], ["O__0"]), forward(["a", "b"]), warn)).toThrow(
      "inputs 'I__0' and 'J__0' both refer to forward argument 0",
    );
    expect(() => mapTorchIO(config(["a", "b"], ["O__0"], DataType.TYPE_STRING), forward(["a", "b"]), warn)).toThrow(
      "unsupported datatype TYPE_STRING for input 'a' for model 'm'",
    );
    expect(() =>
      mapTorchIO(
        config(["a"], ["O__0"]),
        { arguments: [{ name: "a", type: "Dict(str, Tensor)" }], returns: "Tensor" },
        warn,
      ),
    ).toThrow("An input of type 'Dict(str, Tensor)' was detected in the model");
  });

  it("counts what forward returns from its type", () => {
    expect(countReturns("Tensor")).toBe(1);
    expect(countReturns("(Tensor, Tensor)")).toBe(2);
    expect(countReturns("Tuple[Tensor, Tuple[Tensor, Tensor], Tensor]")).toBe(3);
    expect(countReturns("Tensor[]")).toBeUndefined();
    expect(countReturns("List[Tensor]")).toBeUndefined();
  });
});
