import { create } from "@bufbuild/protobuf";
import { ModelConfigSchema, ModelInstanceGroup_Kind } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { groupInstances, instanceSpecs, wholeNumberParameter } from "./instance-specs.js";

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

  it("spreads one group over the GPUs a backend chose for it (data parallel: count 1 on [0, 1], count 2 on [0, 1])", () => {
    const [group] = config([{ name: "d", kind: ModelInstanceGroup_Kind.GPU, count: 1, gpus: [0, 1] }]).instanceGroup;
    if (!group) throw new Error("no group");
    expect(groupInstances(group, "GPU", [0, 1]).map((s) => [s.name, s.device])).toEqual([
      ["d_0", 0],
      ["d_1", 1],
    ]);
    expect(groupInstances({ ...group, count: 2 }, "GPU", [0, 1]).map((s) => s.device)).toEqual([0, 1, 0, 1]);
    // A group the backend runs on the CPU: on device 0, whatever it listed.
    expect(groupInstances(group, "CPU", [0, 1]).map((s) => [s.kind, s.device])).toEqual([["CPU", 0]]);
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
