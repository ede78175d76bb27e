// AOTInductor packages (Triton's `platform: "torch_aoti"`, `model.pt2`) end to end over gRPC, on
// CPU, with real packages that make-aoti-fixtures.py compiles here once (torch.export +
// aoti_compile_and_package): Triton's names from the call spec, a dynamic batch dimension, BF16 /
// FP16 / INT32, several instances, and packages refused at load or requests at run. Needs the torch
// addon built against libtorch 2.x and python3 with the same torch (`node scripts/test-env.mjs`).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { type AotiFixtures, aotiFixtures, aotiModel, readF32, tensors } from "./pytorch-support.js";
import { cleanup, expectGrpcError, recordingLog, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

let fixtures: AotiFixtures;
beforeAll(async () => {
  fixtures = await aotiFixtures();
}, 600_000);

const bytes = (base64: string) => new Uint8Array(Buffer.from(base64, "base64"));
const pt2 = (name: string) => join(fixtures.dir, name, "model.pt2");
/** `count` rows of 4 FP32 values from the fixture's bytes, starting at row `from`. */
const rows = (base64: string, from: number, count: number) => bytes(base64).slice(from * 16, (from + count) * 16);

const addSubConfig = (inputs: [string, string], outputs: [string, string], extra = "") =>
  `max_batch_size: 8\n${tensors("input", `${inputs[0]}:FP32:4`, `${inputs[1]}:FP32:4`)}${tensors(
    "output",
    `${outputs[0]}:FP32:4`,
    `${outputs[1]}:FP32:4`,
  )}${extra}`;

function expectClose(actual: number[], expected: number[]): void {
  expect(actual).toHaveLength(expected.length);
  for (const [i, v] of expected.entries()) expect(actual[i]).toBeCloseTo(v, 4);
}

describe("PyTorch backend: torch_aoti", () => {
  it("serves a package by the call spec's names, with torch's outputs", async () => {
    const repo = tempRepository();
    aotiModel(repo, "add_sub", pt2("add_sub"), addSubConfig(["ARGS[0]", "ARGS[1]"], ["RESULT[0]", "RESULT[1]"]));
    const { client } = await startServer({ modelRepositories: [repo] });
    const e = fixtures.expected.add_sub;
    const response = await client.modelInfer({
      modelName: "add_sub",
      inputs: [
        { name: "ARGS[0]", datatype: "FP32", shape: [BigInt(e.rows), 4n] },
        { name: "ARGS[1]", datatype: "FP32", shape: [BigInt(e.rows), 4n] },
      ],
      rawInputContents: [bytes(e.x), bytes(e.y)],
    });
    expect(response.outputs.map((o) => [o.name, o.shape])).toEqual([
      ["RESULT[0]", [3n, 4n]],
      ["RESULT[1]", [3n, 4n]],
    ]);
    expect(readF32(response.rawOutputContents[0])).toEqual(readF32(bytes(e.sum)));
    expectClose(readF32(response.rawOutputContents[1]), readF32(bytes(e.product)));
  });

  it("batches requests through the exported batch dimension on several instances (INPUT__<i> names)", async () => {
    const repo = tempRepository();
    aotiModel(
      repo,
      "batched",
      pt2("add_sub"),
      addSubConfig(
        ["INPUT__1", "INPUT__0"],
        ["OUTPUT__1", "OUTPUT__0"],
        "dynamic_batching { max_queue_delay_microseconds: 20000 }\ninstance_group [ { kind: KIND_CPU count: 2 } ]\n",
      ),
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const e = fixtures.expected.add_sub;
    // Six one-row requests at once: the batcher joins them (up to 8 rows) and the package runs
    // each batch with its own first dimension.
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        client.modelInfer({
          modelName: "batched",
          inputs: [
            { name: "INPUT__0", datatype: "FP32", shape: [1n, 4n] },
            { name: "INPUT__1", datatype: "FP32", shape: [1n, 4n] },
          ],
          rawInputContents: [rows(e.x, i % 3, 1), rows(e.y, i % 3, 1)],
        }),
      ),
    );
    for (const [i, response] of answers.entries()) {
      const out = Object.fromEntries(response.outputs.map((o, k) => [o.name, readF32(response.rawOutputContents[k])]));
      expect(out.OUTPUT__0).toEqual(readF32(rows(e.sum, i % 3, 1)));
      expectClose(out.OUTPUT__1 ?? [], readF32(rows(e.product, i % 3, 1)));
    }
    const stats = await client.modelStatistics({ name: "batched" });
    const executions = Number(stats.modelStats[0]?.executionCount ?? 0n);
    expect(executions).toBeGreaterThan(0);
    expect(executions).toBeLessThan(6);
  });

  it("takes BF16, FP16 and INT32 tensors, a keyword argument, and returns a dict with a tuple", async () => {
    const repo = tempRepository();
    aotiModel(
      repo,
      "types",
      pt2("types"),
      `max_batch_size: 8\n${tensors("input", "ARGS[0]:BF16:3", "ARGS[1]:FP16:3", "KWARGS[n]:INT32:1")}${tensors(
        "output",
        "RESULT[count]:INT32:1",
        "RESULT[pair][0]:BF16:3",
        "RESULT[pair][1]:FP16:3",
        "RESULT[sum]:FP32:3",
      )}`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const e = fixtures.expected.types;
    const response = await client.modelInfer({
      modelName: "types",
      inputs: [
        { name: "ARGS[0]", datatype: "BF16", shape: [2n, 3n] },
        { name: "ARGS[1]", datatype: "FP16", shape: [2n, 3n] },
        { name: "KWARGS[n]", datatype: "INT32", shape: [2n, 1n] },
      ],
      rawInputContents: [bytes(e.a), bytes(e.b), bytes(e.n)],
    });
    const out = Object.fromEntries(response.outputs.map((o, i) => [o.name, response.rawOutputContents[i]]));
    expect(response.outputs.map((o) => o.datatype)).toEqual(["INT32", "BF16", "FP16", "FP32"]);
    expect(out["RESULT[count]"]).toEqual(bytes(e.count));
    expect(out["RESULT[pair][0]"]).toEqual(bytes(e.pair0));
    expect(out["RESULT[pair][1]"]).toEqual(bytes(e.pair1));
    expectClose(readF32(out["RESULT[sum]"]), readF32(bytes(e.sum)));
  });

  it("refuses a request of a shape the export does not allow with the package's message, and keeps serving", async () => {
    const repo = tempRepository();
    // The config allows what the export does not: 16 rows (the export allows 1 to 8), any width (it is 4).
    aotiModel(
      repo,
      "strict",
      pt2("add_sub"),
      `max_batch_size: 16\n${tensors("input", "INPUT__0:FP32:-1", "INPUT__1:FP32:-1")}${tensors(
        "output",
        "OUTPUT__0:FP32:-1",
        "OUTPUT__1:FP32:-1",
      )}`,
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    const request = (batch: number, width: number) => ({
      modelName: "strict",
      inputs: [
        { name: "INPUT__0", datatype: "FP32", shape: [BigInt(batch), BigInt(width)] },
        { name: "INPUT__1", datatype: "FP32", shape: [BigInt(batch), BigInt(width)] },
      ],
      rawInputContents: [new Uint8Array(batch * width * 4), new Uint8Array(batch * width * 4)],
    });
    await expectGrpcError(
      client.modelInfer(request(2, 5)),
      Code.Internal,
      /^PyTorch execute failure: .*unmatched dim value at 1, expected: 4, but got: 5/s,
    );
    await expectGrpcError(
      client.modelInfer(request(12, 4)),
      Code.Internal,
      /^PyTorch execute failure: .*dim value is too large at 0, expected to be <= 8, but got: 12/s,
    );
    const ok = await client.modelInfer(request(2, 4));
    expect(readF32(ok.rawOutputContents[0])).toEqual(new Array(8).fill(0));
  });

  describe("refused at load", () => {
    async function loadError(folder: (repo: string) => void): Promise<string> {
      const repo = tempRepository();
      folder(repo);
      const { client } = await startServer({ modelRepositories: [repo], controlMode: "explicit" });
      const error = await expectGrpcError(client.repositoryModelLoad({ modelName: "broken" }), Code.InvalidArgument);
      return error.rawMessage;
    }
    const io = addSubConfig(["INPUT__0", "INPUT__1"], ["OUTPUT__0", "OUTPUT__1"]);

    it("a file that is not a package, with libtorch's message; other models still load", async () => {
      const repo = tempRepository();
      const folder = aotiModel(repo, "broken", pt2("add_sub"), io);
      writeFileSync(join(folder, "1", "model.pt2"), "not a zip archive");
      aotiModel(repo, "fine", pt2("add_sub"), io);
      const { client } = await startServer({ modelRepositories: [repo], controlMode: "explicit" });
      await expectGrpcError(
        client.repositoryModelLoad({ modelName: "broken" }),
        Code.InvalidArgument,
        /unable to load model 'broken', .*zip archive/s,
      );
      await client.repositoryModelLoad({ modelName: "fine" });
      expect((await client.modelReady({ name: "fine" })).ready).toBe(true);
    });

    it("a package compiled for CUDA, on a CPU instance", async () => {
      expect(await loadError((repo) => aotiModel(repo, "broken", pt2("cuda"), io))).toMatch(
        /unable to load model 'broken', model\.pt2 was compiled for cuda, .*this instance runs on the CPU \(KIND_CPU\)/,
      );
    });

    it("a config that does not match the call spec, with Triton's messages", async () => {
      expect(
        await loadError((repo) =>
          aotiModel(
            repo,
            "broken",
            pt2("add_sub"),
            `max_batch_size: 8\n${tensors("input", "INPUT__0:FP32:4", "INPUT__1:FP32:4", "INPUT__2:FP32:4")}${tensors("output", "OUTPUT__0:FP32:4")}`,
          ),
        ),
      ).toMatch("unable to load model 'broken', configuration expects 3 inputs, model provides 2 (ARGS[0], ARGS[1])");
      expect(
        await loadError((repo) =>
          aotiModel(repo, "broken", pt2("add_sub"), addSubConfig(["INPUT__0", "INPUT__1"], ["OUTPUT__0", "OUTPUT__2"])),
        ),
      ).toMatch("The output OUTPUT__2 in the model configuration refers to an output index which doesn't exist");
    });

    it("a missing model.pt2, naming the file", async () => {
      expect(
        await loadError((repo) => {
          aotiModel(repo, "broken", pt2("add_sub"), `default_model_filename: "other.pt2"\n${io}`);
        }),
      ).toMatch(/unable to find '.*other\.pt2' for model instance 'broken'/);
    });
  });

  it("logs Triton's warning and uses the config's order when names follow no convention", async () => {
    const repo = tempRepository();
    aotiModel(repo, "ordered", pt2("add_sub"), addSubConfig(["A", "B"], ["SUM", "PRODUCT"]));
    const { log, lines } = recordingLog();
    const { client } = await startServer({ modelRepositories: [repo], log });
    const e = fixtures.expected.add_sub;
    const response = await client.modelInfer({
      modelName: "ordered",
      inputs: [
        { name: "A", datatype: "FP32", shape: [1n, 4n] },
        { name: "B", datatype: "FP32", shape: [1n, 4n] },
      ],
      rawInputContents: [rows(e.x, 0, 1), rows(e.y, 0, 1)],
    });
    expect(readF32(response.rawOutputContents[0])).toEqual(readF32(rows(e.sum, 0, 1)));
    expect(lines.join("\n")).toMatch(/Falling back to enforcing strict ordering from model configuration/);
  });
});
