// The ensemble scheduler over composing models the test completes by hand: data flow, concurrency
// of independent branches, failures naming the step, buffer sharing, and max_inflight_requests.
import { parseModelConfig } from "@galley/config";
import { describe, expect, it } from "vitest";
import { InferenceError } from "../core/errors.js";
import type { InferenceRequest, InferenceResponse } from "../core/inference-request.js";
import type { Tensor } from "../core/tensor.js";
import { EnsembleScheduler } from "./ensemble-scheduler.js";

const tensor = (name: string, value: number, movable = false): Tensor => ({
  name,
  datatype: "INT32",
  shape: [1],
  data: new Uint8Array(new Int32Array([value]).buffer),
  parameters: {},
  movable,
});
const readValue = (t: Tensor | undefined) => (t ? new Int32Array(t.data.slice().buffer)[0] : undefined);

/** Composing models that add 1 to their input (`inc`), or 10 (`ten`), when the test says so. */
function composing() {
  const calls: { request: InferenceRequest; finish: (error?: Error) => void }[] = [];
  const infer = (request: InferenceRequest) =>
    new Promise<InferenceResponse>((resolve, reject) => {
      calls.push({
        request,
        finish: (error) => {
          if (error) return reject(error);
          const add = request.modelName === "ten" ? 10 : 1;
          resolve({
            modelName: request.modelName,
            modelVersion: "1",
            id: request.id,
            parameters: {},
            outputs: [tensor("OUT", (readValue(request.inputs[0]) ?? 0) + add)],
          });
        },
      });
    });
  return { calls, infer };
}

// in → a(inc) → x → c(inc) → out1 ; in → b(ten) → y → out2 ; a and b independent.
const config = (extra = "") =>
  parseModelConfig(`name: "e" platform: "ensemble" max_batch_size: 0
    input { name: "in" data_type: TYPE_INT32 dims: [ 1 ] }
    output { name: "out1" data_type: TYPE_INT32 dims: [ 1 ] }
    output { name: "out2" data_type: TYPE_INT32 dims: [ 1 ] }
    ensemble_scheduling { ${extra}
      step { model_name: "inc" model_version: -1 input_map { key: "IN" value: "in" } output_map { key: "OUT" value: "x" } }
      step { model_name: "ten" model_version: 3 input_map { key: "IN" value: "in" } output_map { key: "OUT" value: "out2" } }
      step { model_name: "inc" model_version: -1 input_map { key: "IN" value: "x" } output_map { key: "OUT" value: "out1" } }
    }`);

const request = (value: number, id = "r"): InferenceRequest => ({
  modelName: "e",
  modelVersion: "",
  id,
  parameters: {},
  inputs: [tensor("in", value, true)],
  outputs: [],
});

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe("EnsembleScheduler", () => {
  it("starts independent steps together, each step as soon as its inputs exist, and returns the outputs", async () => {
    const { calls, infer } = composing();
    const scheduler = new EnsembleScheduler(config(), infer);
    const result = scheduler.enqueue(request(5));
    await flush();
    expect(calls.map((c) => c.request.modelName)).toEqual(["inc", "ten"]);
    expect(calls.map((c) => c.request.modelVersion)).toEqual(["", "3"]);
    calls[1]?.finish();
    await flush();
    expect(calls).toHaveLength(2);
    calls[0]?.finish();
    await flush();
    expect(calls.map((c) => [c.request.modelName, readValue(c.request.inputs[0])])).toEqual([
      ["inc", 5],
      ["ten", 5],
      ["inc", 6],
    ]);
    calls[2]?.finish();
    const { outputs } = await result;
    expect(outputs.map((o) => [o.name, readValue(o)])).toEqual([
      ["out1", 7],
      ["out2", 15],
    ]);
  });

  it("keeps a tensor that two steps read from being moved away by either", async () => {
    const { calls, infer } = composing();
    const scheduler = new EnsembleScheduler(config(), infer);
    const result = scheduler.enqueue(request(1));
    await flush();
    expect(calls.map((c) => c.request.inputs[0]?.movable)).toEqual([false, false]);
    for (const call of calls) call.finish();
    await flush();
    calls[2]?.finish();
    await result;
  });

  it("fails the request when a step fails, naming the step and keeping the step's code", async () => {
    const { calls, infer } = composing();
    const scheduler = new EnsembleScheduler(config(), infer);
    const result = scheduler.enqueue(request(1));
    await flush();
    calls[1]?.finish(new InferenceError("MODEL_NOT_FOUND", { model: "ten" }));
    calls[0]?.finish();
    const error = await result.catch((e: InferenceError) => e);
    expect(error).toBeInstanceOf(InferenceError);
    expect((error as InferenceError).message).toBe(
      "in ensemble 'e', step 1 (model 'ten') failed: Request for unknown model: 'ten' is not found",
    );
    expect((error as InferenceError).code).toBe("NOT_FOUND");
    expect((error as InferenceError).httpStatus).toBe(404);
    expect(calls).toHaveLength(2);
  });

  it("bounds each step's requests in flight with max_inflight_requests", async () => {
    const { calls, infer } = composing();
    const scheduler = new EnsembleScheduler(config("max_inflight_requests: 1"), infer);
    const first = scheduler.enqueue(request(1, "a"));
    const second = scheduler.enqueue(request(2, "b"));
    await flush();
    expect(calls.map((c) => `${c.request.id}:${c.request.modelName}`)).toEqual(["a:inc", "a:ten"]);
    calls[0]?.finish();
    await flush();
    // a's step 0 done: its slot passes to b's step 0, and a's step 2 (its own slot) starts.
    expect(calls.map((c) => `${c.request.id}:${c.request.modelName}`).sort()).toEqual([
      "a:inc",
      "a:inc",
      "a:ten",
      "b:inc",
    ]);
    for (let i = 1; i < 8; i++) {
      calls[i]?.finish();
      await flush();
    }
    const [a, b] = await Promise.all([first, second]);
    expect(a.outputs.map(readValue)).toEqual([3, 11]);
    expect(b.outputs.map(readValue)).toEqual([4, 12]);
  });
});
