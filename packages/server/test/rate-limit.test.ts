// The rate limiter over the real server: a model whose instances need a resource loads, answers
// correctly, and a model needing more than the server grants fails its load with Triton's message.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, copyModel, int32Bytes, readInt32, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

function withGroups(repo: string, count: number): void {
  const config = join(repo, "simple", "config.pbtxt");
  writeFileSync(
    config,
    `${readFileSync(config, "utf8")}\ninstance_group { count: 2 kind: KIND_CPU rate_limiter { resources { name: "R" count: ${count} } priority: 1 } }\n`,
  );
}

describe("rate limiter", () => {
  it("serves a rate-limited model correctly under concurrency", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    withGroups(repo, 1);
    const { client, failedModels } = await startServer({
      modelRepositories: [repo],
      rateLimit: "execution_count",
      rateLimitResources: [{ name: "R", count: 1 }],
    });
    expect(failedModels).toEqual([]);
    const results = await Promise.all(
      Array.from({ length: 20 }, async (_, k) => {
        const response = await client.modelInfer({
          modelName: "simple",
          inputs: [
            { name: "INPUT0", datatype: "INT32", shape: [1n, 16n] },
            { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
          ],
          rawInputContents: [int32Bytes(new Array(16).fill(k)), int32Bytes(new Array(16).fill(1))],
        });
        return readInt32(response.rawOutputContents[0])[0];
      }),
    );
    expect(results).toEqual(Array.from({ length: 20 }, (_, k) => k + 1));
  });

  it("fails the load of a model needing more than --rate-limit-resource grants", async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    withGroups(repo, 2);
    const { client, failedModels } = await startServer({
      modelRepositories: [repo],
      rateLimit: "execution_count",
      rateLimitResources: [{ name: "R", count: 1 }],
    });
    expect(failedModels).toEqual(["simple"]);
    const row = (await client.repositoryIndex({})).models.find((m) => m.name === "simple");
    expect(row?.reason).toBe(
      'Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2',
    );
  });
});
