// A worker's direct routes and calls, with stand-in runners (the PyTorch runner on real models:
// test/bls-direct.test.ts; on a GPU: backends-native/test/gpu). A route is renewed every second,
// so a backend's runner module must be imported once per worker, and one that cannot be loaded
// must leave the calls on the usual path without an import and a warning each. Calls of one turn
// run as one batch; outputs a call wants on the GPU are held by the worker for its next calls.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInputSchema, ModelOutputSchema } from "@galley/proto";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { ERRORS } from "../../base/errors.js";
import type { InferenceRequest } from "../../base/inference-request.js";
import { type DeviceTensor, NO_BYTES, type Tensor } from "../../base/tensor.js";
import type { DeviceRef, OutputTensor } from "../../model/api.js";
import type { DirectRecord, DirectRoute, DirectRun, DirectRunner } from "../backend.js";
import { DirectCalls, ROUTE_RENEW_MS } from "./bls-direct.js";
import { TENSOR_ERROR_IDS, type TensorErrorTable, useErrorTable } from "./js-tensors.js";

useErrorTable(Object.fromEntries(TENSOR_ERROR_IDS.map((id) => [id, ERRORS[id]])) as TensorErrorTable);
const dir = mkdtempSync(join(tmpdir(), "galley-bls-direct-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function calls(warnings: string[], records: DirectRecord[] = [], renewed: string[] = []): DirectCalls {
  const quiet = () => {};
  return new DirectCalls({
    record: (r) => records.push(r),
    renew: (model) => renewed.push(model),
    log: { info: quiet, warn: (m: string) => warnings.push(m), verbose: quiet },
  });
}

function route(runner: string): DirectRoute {
  const config = create(ModelConfigSchema, { name: "m", maxBatchSize: 4 });
  return { model: "m", version: 1, config, target: { runner, spec: {}, instances: 1 } };
}

const request = { model: "m", inputs: [] };

describe("DirectCalls", () => {
  it("imports a runner module once however often its route is learned, and makes a runner each time", async () => {
    const file = join(dir, "runner.mjs");
    writeFileSync(
      file,
      `globalThis.galleyRunnerLoads = (globalThis.galleyRunnerLoads ?? 0) + 1;
export function createDirectRunner() {
  globalThis.galleyRunnersMade = (globalThis.galleyRunnersMade ?? 0) + 1;
  return { run: async () => { throw new Error("not run in this test"); } };
}`,
    );
    const warnings: string[] = [];
    const direct = calls(warnings);
    for (let i = 0; i < 3; i++) direct.learn(request, route(pathToFileURL(file).href));
    // The route's runner is awaited by a call; a cancelled one stops before running.
    await expect(direct.infer(request, () => true, [])).rejects.toThrow("[request id: <id_unknown>] request cancelled");
    const counts = globalThis as { galleyRunnerLoads?: number; galleyRunnersMade?: number };
    expect([counts.galleyRunnerLoads, counts.galleyRunnersMade, warnings]).toEqual([1, 3, []]);
  });

  it("leaves calls on the usual path when the module cannot be loaded, with one warning", async () => {
    const warnings: string[] = [];
    const direct = calls(warnings);
    const missing = route(pathToFileURL(join(dir, "missing.mjs")).href);
    for (let i = 0; i < 4; i++) {
      direct.learn(request, missing);
      expect(await direct.infer(request, () => false, [])).toBeUndefined();
    }
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^direct BLS calls to 'm' are not available here: .*missing\.mjs/);
  });
});

/** `m`: x [-1] FP32 → y, batching up to 4. */
const M = create(ModelConfigSchema, {
  name: "m",
  maxBatchSize: 4,
  input: [create(ModelInputSchema, { name: "x", dataType: DataType.TYPE_FP32, dims: [-1n] })],
  output: [create(ModelOutputSchema, { name: "y", dataType: DataType.TYPE_FP32, dims: [-1n] })],
});

/** The runner module: hands over to whatever runner the test puts on `globalThis.galleyTestRunner`. */
const STAND_IN = join(dir, "stand-in.mjs");
writeFileSync(STAND_IN, "export function createDirectRunner() { return globalThis.galleyTestRunner; }");
const standIn = () => ({
  model: "m",
  version: 1,
  config: M,
  target: { runner: pathToFileURL(STAND_IN).href, spec: {}, instances: 1 },
});

/** A kept tensor as a backend's runner returns one (the PyTorch backend's: `keptTensor`). */
function kept(values: number[], released: number[], id: number): DeviceTensor {
  return {
    kind: "pytorch",
    deviceId: 0,
    byteSize: values.length * 4,
    handle: { id },
    toHost: async () => new Uint8Array(Float32Array.from(values).buffer),
    release: () => released.push(id),
  };
}

/**
 * A runner that records each batch (its requests) and answers y = x + 1 per request: host bytes,
 * or a kept tensor where the request wants y on GPU 0.
 */
function recordingRunner(batches: InferenceRequest[][], released: number[]): DirectRunner {
  let made = 0;
  return {
    async run(requests): Promise<DirectRun> {
      batches.push([...requests]);
      const outcomes = requests.map((r): Tensor[] => {
        const x = r.inputs[0] as Tensor;
        const values = x.device ? [] : Array.from(new Float32Array(x.data.slice().buffer), (v) => v + 1);
        const y = { name: "y", datatype: "FP32" as const, shape: [...x.shape], parameters: {} };
        if (r.deviceOutputs?.get("y") === 0) return [{ ...y, data: NO_BYTES, device: kept(values, released, ++made) }];
        return [{ ...y, data: new Uint8Array(Float32Array.from(values).buffer) }];
      });
      return { outcomes, execution: { inputNs: 1, inferNs: 2, outputNs: 3 } };
    },
  };
}

const x = (rows: number, fill = 1, name = "x"): OutputTensor => ({
  name,
  datatype: "FP32",
  shape: [rows, 2],
  data: new Float32Array(rows * 2).fill(fill),
});

describe("DirectCalls: batches, device tensors, renewal", () => {
  afterEach(() => {
    vi.restoreAllMocks();
    delete (globalThis as { galleyTestRunner?: DirectRunner }).galleyTestRunner;
  });

  function setUp() {
    const batches: InferenceRequest[][] = [];
    const released: number[] = [];
    (globalThis as { galleyTestRunner?: DirectRunner }).galleyTestRunner = recordingRunner(batches, released);
    const records: DirectRecord[] = [];
    const renewed: string[] = [];
    const direct = calls([], records, renewed);
    direct.learn({ model: "m" }, standIn());
    return { direct, batches, released, records, renewed };
  }

  it("runs the calls of one turn as batches of up to max_batch_size with equal dimensions, counting each execution once", async () => {
    const { direct, batches, records } = setUp();
    const rows = [1, 2, 1, 1, 3];
    const answers = await Promise.all(
      rows.map((n, i) => direct.infer({ model: "m", inputs: [x(n, i)] }, () => false, [7])),
    );
    // 1 + 2 + 1 fill the first batch; 1 fits no more (4 elements), nor does 3 beside it.
    expect(batches.map((b) => b.map((r) => r.inputs[0]?.shape[0]))).toEqual([
      [1, 2, 1],
      [1, 3],
    ]);
    expect(answers.map((a) => Array.from(a?.output("y")?.typed() as Float32Array))).toEqual(
      rows.map((n, i) => new Array(n * 2).fill(i + 1)),
    );
    expect(records.map((r) => r.execution && [r.execution.batchSize, r.execution.requests])).toEqual([
      [4, 3],
      undefined,
      undefined,
      [4, 2],
      undefined,
    ]);
    // Rows of another length do not share a batch.
    const wide = { ...x(1), shape: [1, 3], data: new Float32Array(3) };
    await Promise.all([x(1), wide, x(1)].map((t) => direct.infer({ model: "m", inputs: [t] }, () => false, [])));
    expect(batches.slice(2).map((b) => b.map((r) => r.inputs[0]?.shape.join("x")))).toEqual([["1x2", "1x2"], ["1x3"]]);
  });

  it("keeps outputs wanted on the GPU as the worker's tensors, takes them back in place, lets them go with their request", async () => {
    const { direct, batches, released } = setUp();
    const gpu = { kind: "gpu" as const, deviceId: 0 };
    const first = await direct.infer({ model: "m", inputs: [x(2)], preferredMemory: gpu }, () => false, [1]);
    const y = first?.output("y");
    expect(y?.device).toMatchObject({ deviceId: 0, byteSize: 16 });
    expect((y?.device?.ref ?? 0) < 0).toBe(true);
    expect(() => y?.typed()).toThrow(/is held on GPU 0/);
    expect(direct.heldCount).toBe(1);
    // Renamed and handed on: the runner gets the kept tensor itself (its handle), no bytes.
    const second = await direct.infer(
      { model: "m", inputs: [{ ...(y as OutputTensor), name: "x" }], preferredMemory: gpu },
      () => false,
      [1],
    );
    const handedOn = batches[1]?.[0]?.inputs[0];
    expect([handedOn?.device?.kind, handedOn?.device?.handle, handedOn?.data.byteLength]).toEqual([
      "pytorch",
      { id: 1 },
      0,
    ]);
    // Retyped or reshaped: refused as the usual path refuses it.
    await expect(
      direct.infer({ model: "m", inputs: [{ ...(y as OutputTensor), name: "x", shape: [1, 4] }] }, () => false, [1]),
    ).rejects.toMatchObject({
      code: "INVALID_ARG",
      message: expect.stringMatching(/is held on GPU 0 as FP32 \[2, 2\]/),
    });
    expect(
      Array.from(new Float32Array((await direct.hostBytes(y as OutputTensor & { device: DeviceRef })).buffer)),
    ).toEqual([2, 2, 2, 2]);
    // The batch lent it: not let go by the call that read it.
    expect(released).toEqual([]);
    direct.requestEnded(1);
    expect([released.sort(), direct.heldCount]).toEqual([[1, 2], 0]);
    await expect(
      direct.infer({ model: "m", inputs: [{ ...(second?.output("y") as OutputTensor), name: "x" }] }, () => false, [1]),
    ).rejects.toMatchObject({ code: "INVALID_ARG", message: expect.stringMatching(/has been released/) });
    // A tensor of the main thread's (positive ref) is not for a direct call: the usual way.
    const main = { ...x(2), data: new Float32Array(0), device: { ref: 5, deviceId: 0, byteSize: 16 } };
    expect(await direct.infer({ model: "m", inputs: [main] }, () => false, [1])).toBeUndefined();
  });

  it("does not batch a call that wants its outputs on the GPU with one that wants bytes", async () => {
    const { direct, batches } = setUp();
    await Promise.all([
      direct.infer({ model: "m", inputs: [x(1)], preferredMemory: { kind: "gpu", deviceId: 0 } }, () => false, [1]),
      direct.infer({ model: "m", inputs: [x(1)] }, () => false, [1]),
      direct.infer({ model: "m", inputs: [x(1)], preferredMemory: { kind: "cpu" } }, () => false, [1]),
    ]);
    expect(batches.map((b) => b.length)).toEqual([1, 2]);
  });

  it("keeps using a route past its age while asking for it again once, and forgets it when told", async () => {
    const { direct, batches, renewed } = setUp();
    const start = performance.now();
    const clock = vi.spyOn(performance, "now").mockReturnValue(start + ROUTE_RENEW_MS + 1);
    await direct.infer({ model: "m", inputs: [x(1)] }, () => false, []);
    await direct.infer({ model: "m", inputs: [x(1)] }, () => false, []);
    expect([batches.length, renewed]).toEqual([2, ["m"]]);
    direct.learn({ model: "m" }, standIn());
    clock.mockReturnValue(start + 2 * ROUTE_RENEW_MS + 2);
    await direct.infer({ model: "m", inputs: [x(1)] }, () => false, []);
    expect(renewed).toEqual(["m", "m"]);
    direct.forget({ model: "m" });
    expect(await direct.infer({ model: "m", inputs: [x(1)] }, () => false, [])).toBeUndefined();
    expect(batches).toHaveLength(3);
  });
});
