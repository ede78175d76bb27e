// The ensemble scheduler over composing models the test completes by hand: data flow, concurrency
// of independent branches, failures naming the step, buffer sharing, max_inflight_requests, steps
// pruned when no requested output needs them, the batch dimension between batching and
// non-batching models, and the sequence parameters a response carries.
import { parseModelConfig } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { InferenceError } from "../base/errors.js";
import type { InferenceRequest, InferenceResponse } from "../base/inference-request.js";
import type { Parameters, Tensor } from "../base/tensor.js";
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
function composing(options: { configs?: Record<string, ModelConfig>; parameters?: Parameters } = {}) {
  const calls: { request: InferenceRequest; finish: (error?: Error) => void }[] = [];
  const infer = (request: InferenceRequest) =>
    new Promise<InferenceResponse>((resolve, reject) => {
      // The core hands a request the config of the model it resolved to before checking it.
      const config = options.configs?.[request.modelName];
      if (config) request.adapt?.(config);
      calls.push({
        request,
        finish: (error) => {
          if (error) return reject(error);
          const add = request.modelName === "ten" ? 10 : 1;
          const input = request.inputs[0];
          resolve({
            modelName: request.modelName,
            modelVersion: "1",
            id: request.id,
            parameters: request.modelName === "inc" ? (options.parameters ?? {}) : {},
            outputs: [{ ...tensor("OUT", (readValue(input) ?? 0) + add), shape: input?.shape ?? [1] }],
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

const request = (value: number, id = "r", outputs: string[] = [], parameters: Parameters = {}): InferenceRequest => ({
  modelName: "e",
  modelVersion: "",
  id,
  parameters,
  inputs: [tensor("in", value, true)],
  outputs: outputs.map((name) => ({ name, parameters: {} })),
});

/** A composing model's config: one INT32 input `IN` of `dims`, batching up to `maxBatchSize`. */
const step = (name: string, maxBatchSize: number, dims = "[ 1 ]") =>
  parseModelConfig(`name: "${name}" max_batch_size: ${maxBatchSize}
    input { name: "IN" data_type: TYPE_INT32 dims: ${dims} }
    output { name: "OUT" data_type: TYPE_INT32 dims: ${dims} }`);

/** Finish every call as it comes until `result` settles. */
async function drive<T>(calls: { finish: () => void }[], result: Promise<T>): Promise<T> {
  let settled = false;
  void result.finally(() => {
    settled = true;
  });
  let done = 0;
  while (!settled) {
    await flush();
    for (; done < calls.length; done++) calls[done]?.finish();
  }
  return result;
}

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

  it("runs only the steps behind the requested outputs, as Triton prunes them", async () => {
    const { calls, infer } = composing();
    const scheduler = new EnsembleScheduler(config(), infer);
    const only2 = await drive(calls, scheduler.enqueue(request(5, "a", ["out2"])));
    expect(calls.map((c) => c.request.modelName)).toEqual(["ten"]);
    expect(only2.outputs.map((o) => [o.name, readValue(o)])).toEqual([["out2", 15]]);
    calls.length = 0;
    const only1 = await drive(calls, scheduler.enqueue(request(5, "b", ["out1"])));
    expect(calls.map((c) => c.request.modelName)).toEqual(["inc", "inc"]);
    expect(only1.outputs.map((o) => [o.name, readValue(o)])).toEqual([["out1", 7]]);
  });

  it("adds a batch dimension for a batching step of a non-batching ensemble, and strips it from the outputs", async () => {
    const { calls, infer } = composing({ configs: { inc: step("inc", 8), ten: step("ten", 0) } });
    const scheduler = new EnsembleScheduler(config(), infer);
    const { outputs } = await drive(calls, scheduler.enqueue(request(5)));
    // inc batches: [1] becomes [1, 1]; ten does not: [1] stays. The second inc reads inc's [1, 1].
    expect(calls.map((c) => [c.request.modelName, c.request.inputs[0]?.shape])).toEqual([
      ["inc", [1, 1]],
      ["ten", [1]],
      ["inc", [1, 1]],
    ]);
    expect(outputs.map((o) => [o.name, o.shape, readValue(o)])).toEqual([
      ["out1", [1], 7],
      ["out2", [1], 15],
    ]);
  });

  it("strips a batch of one for a non-batching step of a batching ensemble, and gives it back to the outputs", async () => {
    const batching = parseModelConfig(`name: "b" platform: "ensemble" max_batch_size: 4
      input { name: "in" data_type: TYPE_INT32 dims: [ 1 ] }
      output { name: "out" data_type: TYPE_INT32 dims: [ 1 ] }
      ensemble_scheduling { step { model_name: "ten" model_version: -1 input_map { key: "IN" value: "in" } output_map { key: "OUT" value: "out" } } }`);
    const { calls, infer } = composing({ configs: { ten: step("ten", 0) } });
    const scheduler = new EnsembleScheduler(batching, infer);
    const one = await drive(
      calls,
      scheduler.enqueue({ ...request(5), inputs: [{ ...tensor("in", 5), shape: [1, 1] }] }, 1),
    );
    expect(calls[0]?.request.inputs[0]?.shape).toEqual([1]);
    expect(one.outputs.map((o) => [o.shape, readValue(o)])).toEqual([[[1, 1], 15]]);
    // A batch of two cannot go to a model without batching: it passes as it is, for the model to refuse.
    calls.length = 0;
    const pair = { ...tensor("in", 5), shape: [2, 1], data: new Uint8Array(8) };
    await drive(calls, scheduler.enqueue({ ...request(5), inputs: [pair] }, 2));
    expect(calls[0]?.request.inputs[0]?.shape).toEqual([2, 1]);
  });

  it("answers with the sequence its outputs were made in, and passes a composing model's own sequence on", async () => {
    const { calls, infer } = composing();
    const scheduler = new EnsembleScheduler(config(), infer);
    const plain = await drive(calls, scheduler.enqueue(request(1, "p", [], { sequence_id: 5n, sequence_start: true })));
    expect(plain.parameters).toEqual({ sequence_id: 5n, sequence_start: true, sequence_end: false });
    expect(calls.map((c) => c.request.parameters)).toEqual(
      new Array(3).fill({ sequence_id: 5n, sequence_start: true }),
    );
    const named = await drive(
      calls,
      scheduler.enqueue(request(1, "q", [], { sequence_id: "s-1", sequence_end: true })),
    );
    expect(named.parameters).toEqual({ sequence_id: "s-1", sequence_start: false, sequence_end: true });

    // inc answers sequence 9 (START): the step after it runs in that sequence, and out1 carries it.
    const overriding = composing({ parameters: { sequence_id: 9n, sequence_start: true } });
    const chained = new EnsembleScheduler(config(), overriding.infer);
    const out1 = await drive(overriding.calls, chained.enqueue(request(1, "o", ["out1"], { sequence_id: 5n })));
    expect(overriding.calls.map((c) => c.request.parameters)).toEqual([
      { sequence_id: 5n },
      { sequence_id: 9n, sequence_start: true, sequence_end: false },
    ]);
    expect(out1.parameters).toEqual({ sequence_id: 9n, sequence_start: true, sequence_end: false });
  });
});
