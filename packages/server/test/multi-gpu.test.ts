// Several GPUs in one server (issue 55), on a machine without GPUs: the server's GPU list (what its
// CUDA probe finds, in CUDA's numbering after CUDA_VISIBLE_DEVICES) given as `gpus`, real servers on
// port 0, JS models in a temporary repository. A GPU group's instances on each listed GPU, Triton's
// load error for a GPU the server does not have. The GPU side runs in
// backends-native/test/gpu/multi-gpu.mjs.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

/** `name`: a JS model returning its INT32 input, with `groups` as its instance_group. */
function model(repo: string, name: string, groups: string): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"\nbackend: "js"\nmax_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ ${groups} ]\n`,
  );
  writeFileSync(
    join(repo, name, "1", "model.mjs"),
    `export default class {
  async execute(requests) {
    return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").typed() }] }));
  }
}
`,
  );
}

const loadError = async (load: Promise<unknown>): Promise<string> => {
  const error = await load.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectError);
  expect((error as ConnectError).code).toBe(Code.Internal);
  return (error as ConnectError).rawMessage;
};

describe("several GPUs", () => {
  it("keeps a GPU group's list, gives a KIND_GPU group without one every GPU of the server, and serves both", async () => {
    const repo = tempRepository();
    model(repo, "pair", "{ kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }");
    model(repo, "everywhere", "{ kind: KIND_GPU count: 1 }");
    const { client, failedModels } = await startServer({ modelRepositories: [repo], gpus: [0, 1, 2] });
    expect(failedModels).toEqual([]);
    const config = async (name: string) => (await client.modelConfig({ name })).config?.instanceGroup;
    expect((await config("pair"))?.map((g) => [g.count, g.gpus])).toEqual([[2, [0, 1]]]);
    // Triton's auto-complete lists every GPU of the server for a KIND_GPU group that names none.
    expect((await config("everywhere"))?.map((g) => [g.count, g.gpus])).toEqual([[1, [0, 1, 2]]]);
    for (const modelName of ["pair", "everywhere"]) {
      const answer = await client.modelInfer({
        modelName,
        inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
        rawInputContents: [new Uint8Array(Int32Array.of(7).buffer)],
      });
      expect(new Int32Array(answer.rawOutputContents[0]?.slice().buffer ?? new ArrayBuffer(0))).toEqual(
        Int32Array.of(7),
      );
    }
  });

  it("fails the load of a group naming a GPU the server does not have, with Triton's text", async () => {
    const repo = tempRepository();
    model(repo, "pair", "{ kind: KIND_GPU count: 1 gpus: [ 0, 1 ] }");
    // Two GPUs: GPU 2 does not exist.
    model(repo, "third", "{ kind: KIND_GPU count: 1 gpus: [ 0, 2 ] }");
    const two = await startServer({ modelRepositories: [repo], gpus: [0, 1], controlMode: "explicit" });
    await two.client.repositoryModelLoad({ modelName: "pair" });
    expect(await loadError(two.client.repositoryModelLoad({ modelName: "third" }))).toBe(
      "failed to load 'third', failed to poll from model repository: instance group third_0 of model third specifies invalid or unsupported gpu id 2. GPUs with at least the minimum required CUDA compute compatibility of 7.500000 are: 0, 1",
    );
    // CUDA_VISIBLE_DEVICES=1 on that machine: CUDA numbers the one GPU it leaves 0, so GPU 1 is gone.
    const one = await startServer({ modelRepositories: [repo], gpus: [0], controlMode: "explicit" });
    expect(await loadError(one.client.repositoryModelLoad({ modelName: "pair" }))).toContain(
      "instance group pair_0 of model pair specifies invalid or unsupported gpu id 1. GPUs with at least the minimum required CUDA compute compatibility of 7.500000 are: 0",
    );
    // No GPU at all (the message ends in a space, which the gRPC status keeps).
    const none = await startServer({ modelRepositories: [repo], gpus: [], controlMode: "explicit" });
    expect(await loadError(none.client.repositoryModelLoad({ modelName: "pair" }))).toBe(
      "failed to load 'pair', failed to poll from model repository: instance group pair_0 of model pair specifies invalid or unsupported gpu id 0. GPUs with at least the minimum required CUDA compute compatibility of 7.500000 are: ",
    );
  });
});
