// 10,000 requests with mixed priorities through one dynamic-batching model: nothing is lost, every
// answer is right, and the batches formed are reported (printed for the record).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { InferenceRequest } from "../src/index.js";
import { cleanup, copyModel, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

describe("mixed-priority load", () => {
  it("answers 10,000 requests across three priority levels, none lost, each correct", {
    timeout: 120_000,
  }, async () => {
    const repo = tempRepository();
    copyModel("simple", repo);
    const config = join(repo, "simple", "config.pbtxt");
    writeFileSync(
      config,
      `${readFileSync(config, "utf8")}
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 200
  priority_levels: 3
  default_priority_level: 2
}
instance_group { count: 2 kind: KIND_CPU }
`,
    );
    const { server } = await startServer({ modelRepositories: [repo] });
    const total = 10_000;
    const inFlight = 256;
    let next = 0;
    const wrong: number[] = [];
    const failed: string[] = [];
    const byPriority = [0, 0, 0, 0];
    const worker = async () => {
      for (let k = next++; k < total; k = next++) {
        const priority = k % 4; // 0 (the default level), 1, 2, 3
        const a = new Int32Array(16).fill(k);
        const b = new Int32Array(16).fill(7);
        const request: InferenceRequest = {
          modelName: "simple",
          modelVersion: "",
          id: String(k),
          parameters: { priority: BigInt(priority) },
          inputs: [
            {
              name: "INPUT0",
              datatype: "INT32",
              shape: [1, 16],
              data: new Uint8Array(a.buffer),
              parameters: {},
              movable: true,
            },
            {
              name: "INPUT1",
              datatype: "INT32",
              shape: [1, 16],
              data: new Uint8Array(b.buffer),
              parameters: {},
              movable: true,
            },
          ],
          outputs: [],
        };
        try {
          const response = await server.core.infer(request);
          const out = response.outputs[0];
          const sum = out ? new Int32Array(out.data.slice().buffer) : new Int32Array();
          if (response.id !== String(k) || sum.length !== 16 || sum.some((v) => v !== k + 7)) wrong.push(k);
          byPriority[priority] = (byPriority[priority] ?? 0) + 1;
        } catch (error) {
          failed.push(`${k}: ${(error as Error).message}`);
        }
      }
    };
    await Promise.all(Array.from({ length: inFlight }, worker));
    expect(failed).toEqual([]);
    expect(wrong).toEqual([]);
    expect(byPriority).toEqual([2500, 2500, 2500, 2500]);
    const [model] = server.core.statistics("simple", "");
    const stats = model?.stats;
    expect(stats?.success.count).toBe(total);
    expect(stats?.inferenceCount).toBe(total);
    const batches = [...(stats?.batches ?? new Map())].sort((x, y) => x[0] - y[0]);
    const executed = batches.reduce((n, [size, b]) => n + size * b.computeInfer.count, 0);
    expect(executed).toBe(total);
    console.log(
      `mixed-priority load: ${total} requests, ${stats?.executionCount} executions; batch sizes ${batches
        .map(([size, b]) => `${size}×${b.computeInfer.count}`)
        .join(", ")}`,
    );
  });
});
