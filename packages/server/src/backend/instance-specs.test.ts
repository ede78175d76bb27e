import { create } from "@bufbuild/protobuf";
import { ModelConfigSchema, ModelInstanceGroup_Kind } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { instanceSpecs, wholeNumberParameter } from "./instance-specs.js";

const config = (groups: { name: string; kind: ModelInstanceGroup_Kind; count: number; gpus?: number[] }[]) =>
  create(ModelConfigSchema, {
    name: "m",
    instanceGroup: groups,
    parameters: { t: { stringValue: "250" }, bad: { stringValue: "1.5" } },
  });

describe("instanceSpecs", () => {
  it("runs a GPU group's count on each GPU it lists, as Triton does", () => {
    const specs = instanceSpecs(config([{ name: "g", kind: ModelInstanceGroup_Kind.GPU, count: 2, gpus: [0, 3] }]));
    expect(specs.map((s) => [s.name, s.kind, s.device])).toEqual([
      ["g_0", "GPU", 0],
      ["g_1", "GPU", 3],
      ["g_2", "GPU", 0],
      ["g_3", "GPU", 3],
    ]);
  });

  it("gives CPU and MODEL groups count instances on device 0, and resolves KIND_AUTO as the backend says", () => {
    const groups = config([
      { name: "c", kind: ModelInstanceGroup_Kind.CPU, count: 2 },
      { name: "m", kind: ModelInstanceGroup_Kind.MODEL, count: 0 },
      { name: "a", kind: ModelInstanceGroup_Kind.AUTO, count: 1 },
    ]);
    expect(instanceSpecs(groups).map((s) => [s.name, s.kind, s.device])).toEqual([
      ["c_0", "CPU", 0],
      ["c_1", "CPU", 0],
      ["m_0", "MODEL", 0],
      ["a_0", "CPU", 0],
    ]);
    expect(instanceSpecs(groups, "GPU").at(-1)?.kind).toBe("GPU");
  });
});

describe("wholeNumberParameter", () => {
  it("reads a whole number, is undefined when unset, and names the parameter and model otherwise", () => {
    const c = config([]);
    expect(wholeNumberParameter(c, "t")).toBe(250);
    expect(wholeNumberParameter(c, "missing")).toBeUndefined();
    expect(() => wholeNumberParameter(c, "bad")).toThrow(
      "parameter 'bad' of model 'm' must be a whole number, got '1.5'",
    );
  });
});
