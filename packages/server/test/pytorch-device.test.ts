// Tensors on the GPU (issue 19) where there is no GPU: with CPU libtorch models the host path is
// unchanged and the host↔device counters stay 0; the ensemble's device hand-off planner decides
// "host" for CPU steps and says why; the device path's checks of shared-memory places. Real
// models and servers on port 0. The GPU side runs in backends-native/test/gpu/device-tensors-gpu.mjs.
import { cpSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { hostTransfers } from "../src/base/host-transfers.js";
import { createLogger } from "../src/base/log.js";
import type { EnsembleScheduler } from "../src/scheduler/ensemble-scheduler.js";
import { pythonWithNumpy } from "./python-harness.js";
import { f32, readF32, tensors, torchModel } from "./pytorch-support.js";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

const zero = { hostToDevice: 0, deviceToHost: 0, onDevice: 0, betweenGpus: 0 };

/** identity (t = x) → add_sub (t + t, t - t), CPU libtorch models; `handoff` false sets DEVICE_HANDOFF. */
function repository(handoff = true): string {
  const repo = tempRepository();
  torchModel(
    repo,
    "dev_identity",
    "identity",
    tensors("input", "INPUT__0:FP32:4") + tensors("output", "OUTPUT__0:FP32:4"),
  );
  torchModel(
    repo,
    "dev_add_sub",
    "add_sub",
    tensors("input", "INPUT__0:FP32:4", "INPUT__1:FP32:4") + tensors("output", "OUTPUT__0:FP32:4", "OUTPUT__1:FP32:4"),
  );
  const folder = join(repo, "dev_chain");
  torchModel(repo, "dev_chain", "identity", "");
  writeFileSync(
    join(folder, "config.pbtxt"),
    `name: "dev_chain"\nplatform: "ensemble"\n${tensors("input", "X:FP32:4")}${tensors("output", "SUM:FP32:4", "DIFF:FP32:4")}` +
      `ensemble_scheduling { step [
  { model_name: "dev_identity" model_version: -1 input_map { key: "INPUT__0" value: "X" } output_map { key: "OUTPUT__0" value: "t" } },
  { model_name: "dev_add_sub" model_version: -1 input_map [ { key: "INPUT__0" value: "t" }, { key: "INPUT__1" value: "t" } ]
    output_map [ { key: "OUTPUT__0" value: "SUM" }, { key: "OUTPUT__1" value: "DIFF" } ] }
] }\n` +
      (handoff ? "" : `parameters { key: "DEVICE_HANDOFF" value: { string_value: "false" } }\n`),
  );
  return repo;
}

const counts = (model: string) => hostTransfers.snapshot().models[model] ?? { ...zero, absent: true };

describe("tensors on the GPU, without a GPU", () => {
  it("counts 0 host↔device bytes for CPU libtorch models, with a verbose line per execution", async () => {
    const lines: string[] = [];
    const log = createLogger({ write: (line) => lines.push(line), verboseLevel: 1 });
    const { client } = await startServer({ modelRepositories: [repository()], log });
    const before = counts("dev_add_sub");
    const response = await client.modelInfer({
      modelName: "dev_add_sub",
      inputs: [
        { name: "INPUT__0", datatype: "FP32", shape: [4n] },
        { name: "INPUT__1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [f32([1, 2, 3, 4]), f32([1, 1, 1, 1])],
    });
    expect(readF32(response.rawOutputContents[0])).toEqual([2, 3, 4, 5]);
    expect(counts("dev_add_sub")).toEqual(zero);
    expect(before).toMatchObject(zero);
    expect(
      lines.some((l) =>
        /dev_add_sub.*: 1 request\(s\): 0 bytes host→device, 0 bytes device→host, 0 bytes on the device/.test(l),
      ),
    ).toBe(true);
  });

  it("plans 'host' for every tensor of an ensemble of CPU models, and runs it as before", async () => {
    const { server, client } = await startServer({ modelRepositories: [repository()] });
    const scheduler = server.core.models.resolve("dev_chain", "").scheduler as EnsembleScheduler;
    const plan = scheduler.devicePlan();
    expect(plan.decisions).toEqual([
      { tensor: "t", step: 0, reason: "step 0 ('dev_identity') does not run on a GPU that keeps tensors" },
      { tensor: "SUM", step: 1, reason: "step 1 ('dev_add_sub') does not run on a GPU that keeps tensors" },
      { tensor: "DIFF", step: 1, reason: "step 1 ('dev_add_sub') does not run on a GPU that keeps tensors" },
    ]);
    expect(plan.keep.size).toBe(0);
    expect(server.core.devicePlacement("dev_identity", "")).toBeUndefined();
    const response = await client.modelInfer({
      modelName: "dev_chain",
      inputs: [{ name: "X", datatype: "FP32", shape: [4n] }],
      rawInputContents: [f32([1, 2, 3, 4])],
    });
    expect(response.outputs.map((o) => o.name)).toEqual(["SUM", "DIFF"]);
    expect(readF32(response.rawOutputContents[0])).toEqual([2, 4, 6, 8]);
    expect(readF32(response.rawOutputContents[1])).toEqual([0, 0, 0, 0]);
    expect(counts("dev_identity")).toEqual(zero);
    expect(counts("dev_add_sub")).toEqual(zero);
  });

  it("plans nothing when the ensemble sets DEVICE_HANDOFF false", async () => {
    const { server } = await startServer({ modelRepositories: [repository(false)] });
    const scheduler = server.core.models.resolve("dev_chain", "").scheduler as EnsembleScheduler;
    expect(scheduler.devicePlan().decisions).toEqual([]);
  });

  it("reads a system region to the host for a CPU model; a device hold checks the place as a read does", async () => {
    const key = `galley-device-test-${process.pid}`;
    writeFileSync(`/dev/shm/${key}`, Buffer.concat([Buffer.from(f32([5, 6, 7, 8])), Buffer.alloc(16)]));
    const { server } = await startServer({ modelRepositories: [repository()], allowClientShm: true });
    const shm = server.core.sharedMemory;
    await shm.register("in", key, 0, 32);
    try {
      expect(shm.holdDevice({ region: "in", offset: 0, byteSize: 16 })).toBeUndefined();
      expect(() => shm.holdDevice({ region: "in", offset: 24, byteSize: 16 })).toThrow(
        "Invalid offset + byte size for shared memory region: 'in'",
      );
      expect(() => shm.holdDevice({ region: "in", offset: 40, byteSize: 4 })).toThrow(
        "Invalid offset for shared memory region: 'in'",
      );
      expect(() => shm.holdDevice({ region: "nope", offset: 0, byteSize: 4 })).toThrow(
        "Unable to find shared memory region: 'nope'",
      );
      const response = await server.core.infer({
        modelName: "dev_identity",
        modelVersion: "",
        id: "",
        parameters: {},
        inputs: [
          {
            name: "INPUT__0",
            datatype: "FP32",
            shape: [4],
            data: new Uint8Array(0),
            parameters: {},
            sharedMemory: { region: "in", offset: 0, byteSize: 16 },
          },
        ],
        outputs: [
          {
            name: "OUTPUT__0",
            parameters: { shared_memory_region: "in", shared_memory_byte_size: 16, shared_memory_offset: 16 },
          },
        ],
      });
      expect(response.outputs[0]?.sharedMemory).toEqual({ region: "in", offset: 16, byteSize: 16 });
      expect(readF32(await shm.read({ region: "in", offset: 16, byteSize: 16 }))).toEqual([5, 6, 7, 8]);
      expect(counts("dev_identity")).toEqual(zero);
    } finally {
      await shm.unregister("");
      rmSync(`/dev/shm/${key}`, { force: true });
    }
  });

  it("gives BLS calls that prefer GPU memory host tensors from CPU models, from JS and Python alike", async () => {
    const repo = repository();
    const fixtures = fileURLToPath(new URL("./fixtures/bls-device", import.meta.url));
    for (const [name, backend] of [
      ["chain_js", "js"],
      ["chain_py", "python"],
    ] as const) {
      cpSync(join(fixtures, name), join(repo, name), { recursive: true });
      writeFileSync(
        join(repo, name, "config.pbtxt"),
        `name: "${name}"\nbackend: "${backend}"\n${tensors("input", "INPUT__0:FP32:4")}` +
          tensors("output", "OUTPUT__0:FP32:4", "WHERE:UINT8:-1") +
          `parameters { key: "STEPS" value: { string_value: "dev_identity,dev_identity" } }\n`,
      );
    }
    const { client, failedModels } = await startServer({
      modelRepositories: [repo],
      pythonExecutable: pythonWithNumpy(),
    });
    expect(failedModels).toEqual([]);
    const moved = () => {
      const c = counts("dev_identity");
      return [c.hostToDevice, c.deviceToHost, c.onDevice];
    };
    const before = moved();
    for (const name of ["chain_js", "chain_py"]) {
      const response = await client.modelInfer({
        modelName: name,
        inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [4n] }],
        rawInputContents: [f32([1, 2, 3, 4])],
      });
      expect(readF32(response.rawOutputContents[0]), name).toEqual([1, 2, 3, 4]);
      expect(new TextDecoder().decode(response.rawOutputContents[1]), name).toBe("cpu");
    }
    expect(moved()).toEqual(before);
  });
});
