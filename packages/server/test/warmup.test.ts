// Model warmup over the real server: a model becomes READY only after its samples ran.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  copyModel,
  int32Bytes,
  readInt32,
  recordingLog,
  startServer,
  tempRepository,
} from "./support/harness.js";

afterEach(cleanup);

function withWarmup(repo: string, model: string, warmup: string): void {
  const config = join(repo, model, "config.pbtxt");
  writeFileSync(config, `${readFileSync(config, "utf8")}\n${warmup}\n`);
}

describe("model warmup", () => {
  it("runs zero, random and file samples before the models are READY", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    copyModel("mlp_classifier", repo);
    mkdirSync(join(repo, "simple", "warmup"), { recursive: true });
    writeFileSync(join(repo, "simple", "warmup", "ones.bin"), int32Bytes(new Array(16).fill(1)));
    withWarmup(
      repo,
      "simple",
      `model_warmup [
        { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
                                              inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } },
        { name: "file" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "ones.bin" } }
                                     inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } } }
      ]`,
    );
    withWarmup(
      repo,
      "mlp_classifier",
      `model_warmup { name: "random" batch_size: 8 inputs { key: "INPUT" value { data_type: TYPE_FP32 dims: [ 64 ] random_data: true } } }`,
    );
    const { client, failedModels, server } = await startServer({ modelRepositories: [repo] });
    expect(failedModels).toEqual([]);
    expect(server.core.isReady()).toBe(true);
    // Warmup runs on the instances directly: statistics count client requests only.
    const stats = (await client.modelStatistics({ name: "simple" })).modelStats[0];
    expect(stats?.inferenceCount).toBe(0n);
    const response = await client.modelInfer({
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
        { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
      ],
      rawInputContents: [int32Bytes(new Array(16).fill(2)), int32Bytes(new Array(16).fill(3))],
    });
    expect(readInt32(response.rawOutputContents[0])).toEqual(new Array(16).fill(5));
  });

  it("fails the load with Triton's message when a sample cannot run, and the model is not READY", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    mkdirSync(join(repo, "simple", "warmup"), { recursive: true });
    writeFileSync(join(repo, "simple", "warmup", "short.bin"), new Uint8Array(10));
    withWarmup(
      repo,
      "simple",
      `model_warmup { name: "short" batch_size: 1
        inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "short.bin" } }
        inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }`,
    );
    const { log } = recordingLog();
    const { client, failedModels, server } = await startServer({ modelRepositories: [repo], log });
    expect(failedModels).toEqual(["simple"]);
    expect(server.core.isReady()).toBe(false);
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "simple")).toMatchObject({
      state: "UNAVAILABLE",
      reason: "warmup setting expects 64 bytes, but the data provided from short.binonly has 10 bytes",
    });
  });
});
