import { ModelInstanceGroup_Kind } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { parseModelConfig } from "../text-format.js";
import { normalizeInstanceGroups, normalizeModelConfig } from "./normalize.js";

describe("normalizeModelConfig (PROTOCOL.md §4.2)", () => {
  it("defaults the version policy to latest 1 and pins memory for non-ensembles", () => {
    const config = parseModelConfig('name: "m" backend: "onnxruntime"');
    normalizeModelConfig(config);
    expect(config.versionPolicy?.policyChoice).toMatchObject({ case: "latest", value: { numVersions: 1 } });
    expect(config.optimization?.inputPinnedMemory?.enable).toBe(true);
    expect(config.optimization?.outputPinnedMemory?.enable).toBe(true);
  });

  it("keeps an explicit pinned-memory choice and leaves ensembles without optimization", () => {
    const config = parseModelConfig('name: "m" optimization { input_pinned_memory { enable: false } }');
    normalizeModelConfig(config);
    expect(config.optimization?.inputPinnedMemory?.enable).toBe(false);
    const ensemble = parseModelConfig('name: "e" platform: "ensemble" ensemble_scheduling { }');
    normalizeModelConfig(ensemble);
    expect(ensemble.optimization).toBeUndefined();
  });

  it("fills preferred_batch_size with max_batch_size, only when batching", () => {
    const batching = parseModelConfig("max_batch_size: 8 dynamic_batching { }");
    normalizeModelConfig(batching);
    expect(batching.schedulingChoice.value).toMatchObject({ preferredBatchSize: [8] });
    const notBatching = parseModelConfig("max_batch_size: 0 dynamic_batching { }");
    normalizeModelConfig(notBatching);
    expect(notBatching.schedulingChoice.value).toMatchObject({ preferredBatchSize: [] });
    const oldest = parseModelConfig("max_batch_size: 4 sequence_batching { oldest { } }");
    normalizeModelConfig(oldest);
    expect(oldest.schedulingChoice.value).toMatchObject({
      maxSequenceIdleMicroseconds: 1_000_000n,
      strategyChoice: { case: "oldest", value: { preferredBatchSize: [4] } },
    });
  });
});

describe("normalizeInstanceGroups (PROTOCOL.md §4.2)", () => {
  it("adds one group named after the model: 2 CPU instances for onnxruntime without GPUs", () => {
    const config = parseModelConfig('name: "m" backend: "onnxruntime"');
    normalizeInstanceGroups(config);
    expect(config.instanceGroup.map((g) => [g.name, g.kind, g.count, g.gpus])).toEqual([
      ["m", ModelInstanceGroup_Kind.CPU, 2, []],
    ]);
  });

  it("resolves KIND_AUTO to GPU with every GPU when GPUs exist, one instance each", () => {
    const config = parseModelConfig('name: "m" backend: "onnxruntime"');
    normalizeInstanceGroups(config, { gpus: [0, 1] });
    expect(config.instanceGroup.map((g) => [g.kind, g.count, g.gpus])).toEqual([
      [ModelInstanceGroup_Kind.GPU, 1, [0, 1]],
    ]);
  });

  it("names unnamed groups <model>_<index>, counts < 1 as 1 (2 for CPU onnxruntime), and AUTO with an unknown GPU as CPU", () => {
    const config = parseModelConfig(`name: "m" backend: "python"
      instance_group { count: -3 kind: KIND_GPU }
      instance_group { name: "named" kind: KIND_CPU }
      instance_group { gpus: [ 7 ] }`);
    normalizeInstanceGroups(config, { gpus: [0] });
    expect(config.instanceGroup.map((g) => [g.name, g.kind, g.count, g.gpus])).toEqual([
      ["m_0", ModelInstanceGroup_Kind.GPU, 1, [0]],
      ["named", ModelInstanceGroup_Kind.CPU, 1, []],
      ["m_2", ModelInstanceGroup_Kind.CPU, 1, [7]],
    ]);
  });

  it("uses the backend's preferred group when the config has none", () => {
    const config = parseModelConfig('name: "m" backend: "openvino"');
    normalizeInstanceGroups(config, { preferredGroups: [{ kind: ModelInstanceGroup_Kind.CPU, count: 3 }] });
    expect(config.instanceGroup.map((g) => [g.name, g.kind, g.count])).toEqual([["m", ModelInstanceGroup_Kind.CPU, 3]]);
  });
});
