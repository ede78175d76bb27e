// The response cache over the real server: a repeated request is answered from the cache, counted
// as Triton counts it, and shown in Triton's cache metrics.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, copyModel, int32Bytes, readInt32, startServer, tempRepository } from "./support/harness.js";
import { sampleValue, scrape } from "./support/metrics.js";

afterEach(cleanup);

describe("response cache", () => {
  it("answers a repeated request from the cache: one execution, hits and misses counted", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    const config = join(repo, "simple", "config.pbtxt");
    writeFileSync(config, `${readFileSync(config, "utf8")}\nresponse_cache { enable: true }\n`);
    const { client, metricsUrl } = await startServer({
      modelRepositories: [repo],
      responseCacheBytes: 1 << 20,
      metrics: true,
    });
    const infer = (a: number) =>
      client.modelInfer({
        modelName: "simple",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
          { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
        ],
        rawInputContents: [int32Bytes(new Array(16).fill(a)), int32Bytes(new Array(16).fill(1))],
      });
    const first = await infer(5);
    const second = await infer(5);
    const third = await infer(6);
    expect(readInt32(first.rawOutputContents[0])).toEqual(new Array(16).fill(6));
    expect(readInt32(second.rawOutputContents[0])).toEqual(new Array(16).fill(6));
    expect(readInt32(second.rawOutputContents[1])).toEqual(new Array(16).fill(4));
    expect(readInt32(third.rawOutputContents[0])).toEqual(new Array(16).fill(7));
    const stats = (await client.modelStatistics({ name: "simple" })).modelStats[0];
    expect(stats?.inferenceStats?.success?.count).toBe(3n);
    expect(stats?.inferenceStats?.cacheHit?.count).toBe(1n);
    expect(stats?.inferenceStats?.cacheMiss?.count).toBe(2n);
    expect(stats?.executionCount).toBe(2n);
    expect(stats?.inferenceStats?.computeInfer?.count).toBe(2n);
    const metrics = await scrape(metricsUrl);
    const labels = { model: "simple", version: "1" };
    expect(sampleValue(metrics, "nv_cache_num_hits_per_model", labels)).toBe(1);
    expect(sampleValue(metrics, "nv_cache_num_misses_per_model", labels)).toBe(2);
  });

  it("does not cache models that do not enable it, nor without a server cache", async () => {
    const { client } = await startServer({ responseCacheBytes: 1 << 20 });
    for (let i = 0; i < 2; i++) {
      await client.modelInfer({
        modelName: "simple",
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
          { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
        ],
        rawInputContents: [int32Bytes(new Array(16).fill(1)), int32Bytes(new Array(16).fill(1))],
      });
    }
    const stats = (await client.modelStatistics({ name: "simple" })).modelStats[0];
    expect(stats?.executionCount).toBe(2n);
    expect(stats?.inferenceStats?.cacheHit?.count).toBe(0n);
  });
});
