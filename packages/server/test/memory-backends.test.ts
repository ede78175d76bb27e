// Memory accounting of Python-backend and ONNX Runtime models (issue 52): what a version holds
// (its stub's resident set; the server's growth across an ONNX Runtime session's creation) and the
// host working memory of each warm-up batch size (the peak resident set of the process the
// instance runs in), in the statistics, the metrics and the load log line. Also: the GPU-memory
// admission counters on the metrics, and a Triton repository in explicit mode with every memory
// option off behaving as Triton's.
import { cpSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { pythonWithNumpy } from "./python-harness.js";
import {
  cleanup,
  EXAMPLES,
  expectGrpcError,
  type InferenceClient,
  int32Bytes,
  readInt32,
  recordingLog,
  startServer,
  tempRepository,
} from "./support/harness.js";
import { memoryModel } from "./support/memory-models.js";
import { findSamples, sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

const MIB = 2 ** 20;

async function infer(client: InferenceClient, model: string, value: number): Promise<number> {
  const response = await client.modelInfer({
    modelName: model,
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n, 1n] }],
    rawInputContents: [int32Bytes([value])],
  });
  return readInt32(response.rawOutputContents[0])[0] as number;
}

/** A zero-data warm-up sample of `batch` requests for input `IN` (INT32 [1]). */
const warmup = (name: string, batch: number) =>
  `{ name: "${name}" batch_size: ${batch} inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } }`;

describe("Python models", () => {
  it("each warm-up batch size's host working memory is the stub's peak during it; the stub's resident set is the version's", async () => {
    const repo = tempRepository();
    mkdirSync(join(repo, "py", "1"), { recursive: true });
    // The larger sample first: the smaller one's figure shows the peak was measured per sample.
    writeFileSync(
      join(repo, "py", "config.pbtxt"),
      `name: "py"
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
model_warmup [ ${warmup("four", 4)}, ${warmup("one", 1)} ]
`,
    );
    // Each request of a batch takes 32 MiB while it runs (numpy gives large arrays back on free).
    writeFileSync(
      join(repo, "py", "1", "model.py"),
      `import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones(64 * 1024 * 1024, dtype=np.uint8)

    def execute(self, requests):
        scratch = np.ones(len(requests) * 32 * 1024 * 1024, dtype=np.uint8)
        out = [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + int(scratch[0]))]) for r in requests]
        del scratch
        return out
`,
    );
    const { log, lines } = recordingLog();
    const s = await startServer({ modelRepositories: [repo], metrics: true, log, pythonExecutable: pythonWithNumpy() });
    expect(await infer(s.client, "py", 1)).toBe(2);
    const metrics = await scrape(s.metricsUrl);
    const working = (batch: number) =>
      sampleValue(metrics, "galley_model_working_memory_bytes", {
        model: "py",
        version: "1",
        batch_size: String(batch),
        kind: "host",
      });
    expect(working(4)).toBeGreaterThanOrEqual(126 * MIB);
    expect(working(4)).toBeLessThan(192 * MIB);
    expect(working(1)).toBeGreaterThanOrEqual(30 * MIB);
    expect(working(1)).toBeLessThan(96 * MIB);
    expect(findSamples(metrics, "galley_model_working_memory_bytes", { model: "py", kind: "gpu" })).toEqual([]);
    const held = Number((await s.client.modelStatistics({ name: "py" })).modelStats[0]?.memoryUsage[0]?.byteSize);
    expect(held).toBeGreaterThan(64 * MIB);
    expect(sampleValue(metrics, "galley_model_memory_bytes", { model: "py", kind: "host" })).toBe(held);
    const line = lines.find((l) => l.includes("loaded 'py' version 1:"))?.trimEnd();
    expect(line).toMatch(
      /loaded 'py' version 1: \d+\.\d MiB host \(measured after warmup\); host working memory: batch 1 \d+\.\d MiB, batch 4 \d+\.\d MiB$/,
    );
  });
});

describe("ONNX Runtime models", () => {
  it("the server's growth across the session's creation is the version's; its warm-up batch's peak is its working memory", async () => {
    const repo = tempRepository();
    cpSync(join(EXAMPLES, "..", "text-to-video", "models", "super_resolution"), join(repo, "sr"), { recursive: true });
    // A 64 x 64 image: every layer's activations (64 channels) take 1 MiB, the 256 x 256 output 0.75 MiB.
    writeFileSync(
      join(repo, "sr", "config.pbtxt"),
      `name: "sr"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "input", data_type: TYPE_FP32, dims: [ -1, 3, -1, -1 ] } ]
output [ { name: "output", data_type: TYPE_FP32, dims: [ -1, 3, -1, -1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
model_warmup [ { name: "image" batch_size: 1 inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 1, 3, 64, 64 ] zero_data: true } } } ]
`,
    );
    const { log, lines } = recordingLog();
    const s = await startServer({ modelRepositories: [repo], metrics: true, http: true, log });
    const metrics = await scrape(s.metricsUrl);
    const working = sampleValue(metrics, "galley_model_working_memory_bytes", {
      model: "sr",
      version: "1",
      batch_size: "1",
      kind: "host",
    });
    expect(working).toBeGreaterThanOrEqual(MIB);
    const usage = (await s.client.modelStatistics({ name: "sr" })).modelStats[0]?.memoryUsage ?? [];
    expect(usage.map((u) => [u.type, u.id])).toEqual([["CPU", 0n]]);
    const held = Number(usage[0]?.byteSize);
    // At least the 2.4 MB of weights onnxruntime read and copied.
    expect(held).toBeGreaterThanOrEqual(2 * MIB);
    expect(sampleValue(metrics, "galley_model_memory_bytes", { model: "sr", kind: "host" })).toBe(held);
    expect(lines.find((l) => l.includes("loaded 'sr' version 1:"))?.trimEnd()).toMatch(
      /loaded 'sr' version 1: \d+\.\d MiB host \(measured after warmup\); host working memory: batch 1 \d+\.\d MiB$/,
    );
  });
});

describe("GPU-memory admission on the metrics", () => {
  it("with --gpu-memory-admission, each version has its delayed, reduced and refused batch counters; without, none", async () => {
    const repo = tempRepository();
    memoryModel(repo, "a", { mib: 1, offset: 1 });
    const on = await startServer({
      modelRepositories: [repo],
      metrics: true,
      gpuMemoryAdmission: { reserveBytes: 0, waitSecs: 1 },
    });
    const metrics = await scrape(on.metricsUrl);
    expect(metrics.types.get("galley_model_memory_admission_batches_total")).toBe("counter");
    // CPU instances are never held back: every count is 0.
    for (const outcome of ["delayed", "reduced", "refused"]) {
      expect(
        sampleValue(metrics, "galley_model_memory_admission_batches_total", { model: "a", version: "1", outcome }),
      ).toBe(0);
    }
    await on.close();
    const off = await startServer({ modelRepositories: [repo], metrics: true });
    expect((await scrape(off.metricsUrl)).types.has("galley_model_memory_admission_batches_total")).toBe(false);
  });
});

describe("a Triton repository in explicit mode with the memory options off", () => {
  it("loads, serves and unloads only as asked, evicts nothing, and answers Triton's errors", async () => {
    const repo = tempRepository();
    // Three 64 MiB models: more than the smallest budget the other tests use, and nothing goes.
    for (const [i, name] of ["a", "b", "c"].entries()) memoryModel(repo, name, { mib: 64, offset: 100 * (i + 1) });
    const s = await startServer({ modelRepositories: [repo], controlMode: "explicit", metrics: true });
    const states = async () =>
      Object.fromEntries(
        (await s.client.repositoryIndex({})).models.map((m) => [
          m.name,
          `${m.state}${m.reason ? `: ${m.reason}` : ""}`,
        ]),
      );
    expect(await states()).toEqual({ a: "", b: "", c: "" });
    for (const name of ["a", "b", "c"]) await s.client.repositoryModelLoad({ modelName: name });
    for (let round = 0; round < 2; round++) {
      for (const [i, name] of ["a", "b", "c"].entries()) {
        const response = await s.client.modelInfer({
          modelName: name,
          inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
          rawInputContents: [int32Bytes([round])],
        });
        expect(readInt32(response.rawOutputContents[0])[0]).toBe(100 * (i + 1) + round);
      }
    }
    expect(await states()).toEqual({ a: "READY", b: "READY", c: "READY" });
    await s.client.repositoryModelUnload({ modelName: "b" });
    expect(await states()).toEqual({ a: "READY", b: "UNAVAILABLE: unloaded", c: "READY" });
    // An unloaded model stays unloaded: inference does not load it.
    await expectGrpcError(
      s.client.modelInfer({
        modelName: "b",
        inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
        rawInputContents: [int32Bytes([1])],
      }),
      Code.NotFound,
      "Request for unknown model: 'b' has no available versions",
    );
    expect(await states()).toEqual({ a: "READY", b: "UNAVAILABLE: unloaded", c: "READY" });
    const metrics = await scrape(s.metricsUrl);
    for (const family of [
      "galley_model_loads_on_demand_total",
      "galley_model_evictions_total",
      "galley_model_load_waiting_requests",
      "galley_model_memory_budget_bytes",
      "galley_model_memory_admission_batches_total",
    ]) {
      expect(metrics.types.has(family)).toBe(false);
    }
    expect(s.server.core.isReady()).toBe(true);
  });
});
