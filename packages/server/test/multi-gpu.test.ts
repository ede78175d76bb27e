// Several GPUs in one server (issue 55), on a machine without GPUs: the server's GPU list (what its
// CUDA probe finds, in CUDA's numbering after CUDA_VISIBLE_DEVICES) given as `gpus`, real servers on
// port 0, JS models in a temporary repository. A GPU group's instances on each listed GPU, Triton's
// load error for a GPU the server does not have. The GPU side runs in
// backends-native/test/gpu/multi-gpu.mjs.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { parseModelConfig } from "@galley/config";
import { afterEach, describe, expect, it } from "vitest";
import type { BackendInstance } from "../src/backend/backend.js";
import { createPyTorchBackend, type TorchSupport } from "../src/backend/pytorch/pytorch-backend.js";
import { TORCH_FIXTURES, tensors } from "./pytorch-support.js";
import { cleanup, quietLog, startServer, tempRepository } from "./support/harness.js";

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

describe("the PyTorch backend on several GPUs (CPU libtorch standing in for each GPU)", () => {
  /** The real torch addon, saying it sees `gpus` GPUs and running each instance on the CPU; what each load asked for. */
  async function standIn(gpus: number) {
    const real = (await import("@galley/backends-native/torch")) as unknown as TorchSupport;
    const asked: [string, number][] = [];
    const torch: TorchSupport = {
      torchSupport: () => ({ ...real.torchSupport(), cudaCompiled: true, cudaDevices: gpus }),
      loadTorchModel: (path, options) => {
        asked.push([options.device, options.deviceId]);
        return real.loadTorchModel(path, { ...options, device: "cpu", deviceId: 0 });
      },
    };
    return { backend: createPyTorchBackend({ log: quietLog(), torch: async () => torch }), asked };
  }
  const load = async (backend: ReturnType<typeof createPyTorchBackend>, groups: string) => {
    const config = parseModelConfig(
      `name: "dp"\nplatform: "pytorch_libtorch"\n${tensors("input", "INPUT__0:FP32:4")}${tensors("output", "OUTPUT__0:FP32:4")}instance_group [ ${groups} ]\n`,
    );
    const dir = tempRepository();
    mkdirSync(join(dir, "dp", "1"), { recursive: true });
    writeFileSync(join(dir, "dp", "1", "model.pt"), readFileSync(join(TORCH_FIXTURES, "identity.pt")));
    return backend.load({
      config,
      version: 1,
      modelPath: join(dir, "dp"),
      versionPath: join(dir, "dp", "1"),
      log: quietLog(),
    });
  };
  const placed = (instances: readonly BackendInstance[]) => instances.map((i) => [i.name, i.device]);

  it("starts count instances on each listed GPU in Triton's order, each on its GPU; device tensors only for a model on one GPU", async () => {
    const { backend, asked } = await standIn(3);
    const two = await load(backend, '{ name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 2 ] }');
    try {
      expect(placed(two.instances)).toEqual([
        ["g_0", 0],
        ["g_1", 2],
        ["g_2", 0],
        ["g_3", 2],
      ]);
      expect(asked).toEqual([
        ["cuda", 0],
        ["cuda", 2],
        ["cuda", 0],
        ["cuda", 2],
      ]);
      // Instances on several GPUs read host inputs: no device placement for the core.
      expect(two.deviceTensors).toBeUndefined();
    } finally {
      await two.unload();
    }
    const one = await load(
      backend,
      '{ name: "g" kind: KIND_GPU count: 1 gpus: [ 1 ] }, { name: "c" kind: KIND_CPU count: 1 }',
    );
    try {
      expect(placed(one.instances)).toEqual([
        ["g_0", 1],
        ["c_0", undefined],
      ]);
      expect(one.deviceTensors).toBeUndefined();
    } finally {
      await one.unload();
    }
    const single = await load(backend, '{ name: "g" kind: KIND_GPU count: 2 gpus: [ 1 ] }');
    try {
      expect(single.deviceTensors).toEqual({ deviceId: 1, kind: "pytorch" });
    } finally {
      await single.unload();
    }
  });

  it("refuses a GPU libtorch does not see, naming the group", async () => {
    const { backend, asked } = await standIn(2);
    await expect(load(backend, '{ name: "g" kind: KIND_GPU count: 1 gpus: [ 0, 2 ] }')).rejects.toThrow(
      "unable to load model 'dp', instance group g names GPU 2; libtorch sees 2",
    );
    expect(asked).toEqual([]);
  });
});
