import { parseModelConfig } from "@galley/config";
import { describe, expect, it } from "vitest";
import { batchShapes, cudaGraphPlan, describeShapes } from "./cuda-graphs.js";

const config = (extra: string, maxBatch = 8) =>
  parseModelConfig(`name: "m"
platform: "pytorch_libtorch"
max_batch_size: ${maxBatch}
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4, -1 ] }, { name: "T" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4, -1 ] } ]
${extra}`);

const shapes = (x: number[], t: number[]) =>
  new Map([
    ["X", x],
    ["T", t],
  ]);

describe("cudaGraphPlan", () => {
  it("is off without optimization.cuda.graphs", () => {
    expect(cudaGraphPlan(config(""))).toBeUndefined();
    expect(cudaGraphPlan(config("optimization { cuda { graphs: false } }"))).toBeUndefined();
  });

  it("allows every batch without graph_spec, up to 16 graphs or max_batch_size", () => {
    const plan = cudaGraphPlan(config("optimization { cuda { graphs: true } }"));
    expect(plan?.limit).toBe(16);
    expect(plan?.allows(shapes([3, 4, 9], [3, 1]))).toBe(true);
    expect(plan?.notes).toEqual([]);
    expect(cudaGraphPlan(config("optimization { cuda { graphs: true } }", 64))?.limit).toBe(64);
    expect(cudaGraphPlan(config("optimization { cuda { graphs: true } }", 100_000))?.limit).toBe(4096);
  });

  it("with graph_spec, allows exactly the specs' shapes (batch_size as the first dimension)", () => {
    const plan = cudaGraphPlan(
      config(`optimization { cuda { graphs: true graph_spec [
        { batch_size: 4 input { key: "X" value { dim: [ 4, 16 ] } } input { key: "T" value { dim: [ 1 ] } } },
        { batch_size: 8 input { key: "X" value { dim: [ 4, 16 ] } } input { key: "T" value { dim: [ 1 ] } } }
      ] } }`),
    );
    expect(plan?.limit).toBe(2);
    expect(plan?.allows(shapes([4, 4, 16], [4, 1]))).toBe(true);
    expect(plan?.allows(shapes([8, 4, 16], [8, 1]))).toBe(true);
    expect(plan?.allows(shapes([5, 4, 16], [5, 1]))).toBe(false);
    expect(plan?.allows(shapes([4, 4, 17], [4, 1]))).toBe(false);
    expect(plan?.allows(new Map([["X", [4, 4, 16]]]))).toBe(false);
  });

  it("without batching, a spec's dims are the whole shape", () => {
    const plan = cudaGraphPlan(
      config(
        `optimization { cuda { graphs: true graph_spec { input { key: "X" value { dim: [ 4, 2 ] } } input { key: "T" value { dim: [ 1 ] } } } } }`,
        0,
      ),
    );
    expect(plan?.allows(shapes([4, 2], [1]))).toBe(true);
    expect(plan?.allows(shapes([4, 3], [1]))).toBe(false);
  });

  it("notes what it does not use: lower bounds, unknown inputs, busy-wait events, an output copy stream", () => {
    const plan = cudaGraphPlan(
      config(`optimization { cuda { graphs: true busy_wait_events: true output_copy_stream: true graph_spec {
        batch_size: 2 input { key: "Z" value { dim: [ 1 ] } }
        graph_lower_bound { batch_size: 1 input { key: "Z" value { dim: [ 1 ] } } } } } }`),
    );
    expect(plan?.notes).toEqual([
      "graph_spec 0: graph_lower_bound is not used; a graph is captured for the spec's exact shapes",
      "graph_spec 0 names input 'Z', which the model does not have",
      "busy_wait_events is not used by the PyTorch backend",
      "output_copy_stream is not used by the PyTorch backend",
    ]);
  });
});

describe("batchShapes", () => {
  const request = (x: number[], t: number[]) => ({
    inputs: [
      { name: "X", shape: x },
      { name: "T", shape: t },
    ],
  });
  it("sums the requests' batch dimensions when batching", () => {
    const batch = batchShapes([request([2, 4, 9], [2, 1]), request([3, 4, 9], [3, 1])], true);
    expect(describeShapes(batch)).toBe("X [5,4,9], T [5,1]");
  });
  it("takes the one request's shapes as they are otherwise", () => {
    expect(describeShapes(batchShapes([request([4, 9], [1])], false))).toBe("X [4,9], T [1]");
  });
});
