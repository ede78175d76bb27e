import { create } from "@bufbuild/protobuf";
import { ModelEnsembling_StepSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { ANY_DEVICE, planDeviceHandoff, type StepPlacement } from "./ensemble-device-plan.js";

const step = (model: string, inputs: Record<string, string>, outputs: Record<string, string>) =>
  create(ModelEnsembling_StepSchema, { modelName: model, modelVersion: -1n, inputMap: inputs, outputMap: outputs });

// a → [0 upscale] → big → [1 filter] → smooth → [2 downscale] → OUT; big also read by [3 probe].
const steps = [
  step("upscale", { INPUT__0: "FRAME" }, { OUTPUT__0: "big" }),
  step("filter", { INPUT__0: "big" }, { OUTPUT__0: "smooth" }),
  step("downscale", { INPUT__0: "smooth" }, { OUTPUT__0: "OUT" }),
  step("probe", { INPUT__0: "big" }, { OUTPUT__0: "STATS" }),
];
const gpu = (deviceId: number, kind = "pytorch"): StepPlacement => ({ deviceId, kind });
const plan = (live: number[], returned: string[], where: (StepPlacement | undefined)[]) =>
  planDeviceHandoff(steps, new Set(live), new Set(returned), (i) => where[i]);
const decided = (p: ReturnType<typeof plan>) =>
  Object.fromEntries(p.decisions.map((d) => [d.tensor, d.deviceId ?? "host"]));

describe("planDeviceHandoff", () => {
  it("keeps a tensor on the GPU when its maker and every reader run there", () => {
    const p = plan([0, 1, 2], ["OUT"], [gpu(0), gpu(0), gpu(0), undefined]);
    expect(decided(p)).toEqual({ big: 0, smooth: 0, OUT: "host" });
    expect(p.keep).toEqual(
      new Map([
        [0, new Map([["OUTPUT__0", 0]])],
        [1, new Map([["OUTPUT__0", 0]])],
      ]),
    );
    expect(p.decisions.find((d) => d.tensor === "OUT")?.reason).toBe("the ensemble returns it");
  });

  it("sends through the host a tensor any reader takes on the host or of another kind on its GPU", () => {
    expect(decided(plan([0, 1, 2, 3], ["OUT", "STATS"], [gpu(0), gpu(0), gpu(0), undefined]))).toMatchObject({
      big: "host",
      smooth: 0,
    });
    expect(decided(plan([0, 1, 2], ["OUT"], [gpu(0), gpu(0, "tensorrt"), gpu(0), undefined]))).toMatchObject({
      big: "host",
      smooth: "host",
    });
  });

  it("keeps a tensor on its maker's GPU for readers on other GPUs (the core copies it there device to device)", () => {
    // Stages on different GPUs: upscale on 0, filter on 1, downscale on 1, probe on 2.
    const p = plan([0, 1, 2, 3], ["OUT", "STATS"], [gpu(0), gpu(1), gpu(1), gpu(2)]);
    expect(decided(p)).toEqual({ big: 0, smooth: 1, OUT: "host", STATS: "host" });
    // Kept where it is made: the backend keeps outputs on its own GPU only.
    expect(p.keep.get(0)).toEqual(new Map([["OUTPUT__0", 0]]));
    expect(p.keep.get(1)).toEqual(new Map([["OUTPUT__0", 1]]));
    expect(p.decisions.find((d) => d.tensor === "big")?.reason).toBe(
      "every reader takes it on a GPU: on GPU 0, and copied device to device to GPU 1, 2",
    );
    expect(p.decisions.find((d) => d.tensor === "smooth")?.reason).toBe("every reader takes it on GPU 1");
    // Another kind on another GPU reads the copy (plain device memory there) as well.
    expect(decided(plan([0, 1, 2], ["OUT"], [gpu(0), gpu(1, "tensorrt"), gpu(1), undefined])).big).toBe(0);
    // A reader on the host still sends it through the host.
    expect(decided(plan([0, 1, 2, 3], ["OUT", "STATS"], [gpu(0), gpu(1), gpu(1), undefined])).big).toBe("host");
  });

  it("decides host for CPU makers, and only counts the readers that run", () => {
    const cpu = plan([0, 1, 2], ["OUT"], [undefined, gpu(0), gpu(0), undefined]);
    expect(decided(cpu)).toEqual({ big: "host", smooth: 0, OUT: "host" });
    expect(cpu.decisions[0]?.reason).toBe("step 0 ('upscale') does not run on a GPU that keeps tensors");
    // The CPU probe is pruned (its output not wanted): big may stay on the GPU.
    expect(decided(plan([0, 1, 2], ["OUT"], [gpu(0), gpu(0), gpu(0), undefined])).big).toBe(0);
    expect(plan([0], [], [gpu(0)]).decisions[0]?.reason).toBe("no step reads it");
  });

  it("keeps a returned tensor on its GPU only for a caller that takes it there (a CUDA region, a BLS call)", () => {
    const where = [gpu(0), gpu(0), gpu(0), undefined];
    const into = (regions: [string, number][]) =>
      planDeviceHandoff(steps, new Set([0, 1, 2]), new Set(["OUT"]), (i) => where[i], new Map(regions));
    const same = into([["OUT", 0]]);
    expect(decided(same)).toEqual({ big: 0, smooth: 0, OUT: 0 });
    expect(same.keep.get(2)).toEqual(new Map([["OUTPUT__0", 0]]));
    expect(same.decisions.find((d) => d.tensor === "OUT")?.reason).toBe(
      "the ensemble returns it to a caller that takes it on GPU 0",
    );
    const other = into([["OUT", 1]]);
    expect(decided(other).OUT).toBe("host");
    expect(other.keep.has(2)).toBe(false);
    expect(other.decisions.find((d) => d.tensor === "OUT")?.reason).toBe(
      "the ensemble returns it to a caller that takes it on GPU 1, it is made on GPU 0",
    );
    // Returned into a region and also read by a step on the host: the host reader decides.
    const read = planDeviceHandoff(
      steps,
      new Set([0, 1, 2, 3]),
      new Set(["big"]),
      (i) => where[i],
      new Map([["big", 0]]),
    );
    expect(decided(read).big).toBe("host");
  });

  it("hands tensors between a Python model (any GPU, plain device memory) and libtorch models", () => {
    // What python-backend.ts declares with FORCE_CPU_ONLY_INPUT_TENSORS "no".
    const python: StepPlacement = { kind: "region", takes: ["pytorch"] };
    const mixed = plan([0, 1, 2], ["OUT"], [gpu(0), python, gpu(0), undefined]);
    // libtorch → Python (one device copy into memory the stub maps) → libtorch (in place).
    expect(decided(mixed)).toEqual({ big: 0, smooth: 0, OUT: "host" });
    expect(mixed.decisions.find((d) => d.tensor === "smooth")?.reason).toBe("every reader takes it on GPU 0");
    // Python → Python: wherever the first model puts it.
    const both = plan([0, 1, 2], ["OUT"], [gpu(0), python, python, undefined]);
    expect(decided(both)).toEqual({ big: 0, smooth: ANY_DEVICE, OUT: "host" });
    expect(both.decisions.find((d) => d.tensor === "smooth")?.reason).toBe(
      "every reader takes it on the GPU it is made on",
    );
    // Readers on two GPUs: one of them would get it from another GPU, so through the host.
    const split = plan([0, 1, 2, 3], ["OUT", "STATS"], [python, gpu(0), gpu(0), gpu(1)]);
    expect(decided(split).big).toBe("host");
    expect(split.decisions.find((d) => d.tensor === "big")?.reason).toBe(
      "its readers take it on different GPUs (0, 1)",
    );
    // A kind the Python model does not take, and a returned tensor a region takes.
    expect(decided(plan([0, 1, 2], ["OUT"], [gpu(0, "tensorrt"), python, gpu(0), undefined])).big).toBe("host");
    const returned = planDeviceHandoff(
      steps,
      new Set([0, 1, 2]),
      new Set(["OUT"]),
      (i) => [gpu(0), gpu(0), python][i],
      new Map([["OUT", 0]]),
    );
    expect(decided(returned).OUT).toBe(0);
  });
});
