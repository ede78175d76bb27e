// Implicit state (sequence_batching.state) over the real server: an ONNX accumulator whose
// running sum lives in Galley between a sequence's requests, starting from `initial_state`.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { model, node, OnnxType, tensorInfo } from "../../../examples/scripts/onnx-builder.js";
import {
  cleanup,
  type InferenceClient,
  int32Bytes,
  readInt32,
  sequenceParameters,
  startServer,
  tempRepository,
} from "./support/harness.js";

afterEach(cleanup);

/** OUTPUT = ACC_OUT = ACC_IN + INPUT, all INT32 [batch, 1]: the state is the running sum. */
const ACCUMULATOR = model({
  name: "accumulator",
  doc: "OUTPUT = ACC_OUT = ACC_IN + INPUT (test only)",
  inputs: [tensorInfo("INPUT", OnnxType.INT32, ["batch", 1]), tensorInfo("ACC_IN", OnnxType.INT32, ["batch", 1])],
  outputs: [tensorInfo("OUTPUT", OnnxType.INT32, ["batch", 1]), tensorInfo("ACC_OUT", OnnxType.INT32, ["batch", 1])],
  nodes: [node("Add", ["ACC_IN", "INPUT"], ["OUTPUT"]), node("Identity", ["OUTPUT"], ["ACC_OUT"])],
});

/** A repository holding the accumulator as `acc`, its state declared with `initial` (pbtxt) and `files` in initial_state/. */
function accumulator(initial: string, files: Record<string, Uint8Array> = {}): string {
  const repo = tempRepository();
  mkdirSync(join(repo, "acc", "1"), { recursive: true });
  writeFileSync(join(repo, "acc", "1", "model.onnx"), ACCUMULATOR);
  writeFileSync(
    join(repo, "acc", "config.pbtxt"),
    `name: "acc"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] ${initial} } ]
}
`,
  );
  if (Object.keys(files).length > 0) mkdirSync(join(repo, "acc", "initial_state"));
  for (const [name, bytes] of Object.entries(files)) writeFileSync(join(repo, "acc", "initial_state", name), bytes);
  return repo;
}

async function add(client: InferenceClient, id: number, value: number, start = false, end = false): Promise<number> {
  const response = await client.modelInfer({
    modelName: "acc",
    parameters: sequenceParameters(BigInt(id), start, end),
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1n, 1n] }],
    rawInputContents: [int32Bytes([value])],
  });
  // The state output is Galley's, not the client's: only OUTPUT comes back.
  expect(response.outputs.map((o) => o.name)).toEqual(["OUTPUT"]);
  return readInt32(response.rawOutputContents[0])[0] ?? Number.NaN;
}

describe("implicit sequence state", () => {
  it("carries each sequence's state between its requests, from the initial_state data_file", async () => {
    const repo = accumulator(
      `initial_state { name: "hundred" data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred.bin" }`,
      {
        "hundred.bin": int32Bytes([100]),
      },
    );
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);
    // Two interleaved sequences, concurrently: each sums its own values from 100.
    const [a, b] = await Promise.all([
      (async () => [await add(client, 1, 1, true), await add(client, 1, 2), await add(client, 1, 3, false, true)])(),
      (async () => [await add(client, 2, 10, true), await add(client, 2, 20, false, true)])(),
    ]);
    expect(a).toEqual([101, 103, 106]);
    expect(b).toEqual([110, 130]);
    // A new sequence under a used id starts from the initial state again, and so does a restart.
    expect(await add(client, 1, 5, true)).toBe(105);
    expect(await add(client, 1, 5)).toBe(110);
    expect(await add(client, 1, 7, true)).toBe(107);
  });

  it("starts from zeros with zero_data, or with no initial_state at all", async () => {
    for (const initial of [`initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }`, ""]) {
      const { client, failedModels, close } = await startServer({ modelRepositories: [accumulator(initial)] });
      expect(failedModels).toEqual([]);
      expect([await add(client, 9, 4, true), await add(client, 9, 4, false, true)]).toEqual([4, 8]);
      await close();
    }
  });

  it("fails the load with Triton's messages for a bad initial_state", async () => {
    const cases: [string, Record<string, Uint8Array>, string][] = [
      [
        `initial_state { name: "short" data_type: TYPE_INT32 dims: [ 1 ] data_file: "short.bin" }`,
        { "short.bin": new Uint8Array(2) },
        "initial_state setting expects 4 bytes, but the data provided from short.binonly has 2 bytes.",
      ],
      [
        `initial_state { name: "wide" data_type: TYPE_INT32 dims: [ 2 ] zero_data: true }`,
        {},
        "'initial_state' dim for input name 'ACC_IN' doesn't match 'state' dim description. 2 != 1",
      ],
      [
        `initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }`,
        {},
        "Field 'name' must be set when using initial_state for state input 'ACC_IN'.",
      ],
      [
        `initial_state { name: "escape" data_type: TYPE_INT32 dims: [ 1 ] data_file: "../config.pbtxt" }`,
        {},
        "initial_state data_file '../config.pbtxt' must name a file inside the model's 'initial_state' folder",
      ],
    ];
    for (const [initial, files, reason] of cases) {
      const { client, failedModels, close } = await startServer({ modelRepositories: [accumulator(initial, files)] });
      expect(failedModels).toEqual(["acc"]);
      const index = await client.repositoryIndex({});
      expect(index.models.find((m) => m.name === "acc")).toMatchObject({ state: "UNAVAILABLE", reason });
      await close();
    }
  });
});
