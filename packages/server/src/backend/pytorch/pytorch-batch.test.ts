// Deferred completion in a PyTorch batch (issue 50) without a GPU: which batches may be answered
// before their GPU work ends, and that memory of another process they read is given back only
// once that work has ended. The instance is a stand-in for the addon (`execute`), as on a GPU.
import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema, ModelInputSchema, ModelOutputSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import type { InferenceRequest } from "../../base/inference-request.js";
import { type DeviceTensor, NO_BYTES, type Tensor } from "../../base/tensor.js";
import { TorchBatches } from "./pytorch-batch.js";
import { mapTorchIO } from "./pytorch-io.js";
import type { TorchKeptTensor, TorchProtocol } from "./pytorch-messages.js";

const config = create(ModelConfigSchema, {
  name: "denoiser",
  maxBatchSize: 0,
  input: [create(ModelInputSchema, { name: "x", dataType: DataType.TYPE_FP32, dims: [4n] })],
  output: [create(ModelOutputSchema, { name: "y", dataType: DataType.TYPE_FP32, dims: [4n] })],
});
const io = mapTorchIO(config, { arguments: [{ name: "x", type: "Tensor" }], returns: "Tensor" }, () => {});

/** A kept output as the addon returns it; `event` when its batch was deferred. */
function kept(event: Uint8Array | null, ready: Promise<void>): TorchKeptTensor {
  return {
    deviceId: 0,
    byteSize: 16,
    pointer: 0x7000_0000n,
    datatype: "FP32",
    shape: [4],
    disposed: false,
    readyEvent: event,
    whenReady: () => ready,
    narrow: () => kept(event, ready),
    toHost: async () => new Uint8Array(16),
    copyTo: async () => {},
    dispose: () => {},
  };
}

function input(device: DeviceTensor | undefined): Tensor {
  return {
    name: "x",
    datatype: "FP32",
    shape: [4],
    parameters: {},
    data: device ? NO_BYTES : new Uint8Array(16),
    ...(device ? { device } : {}),
  };
}

function request(x: Tensor): InferenceRequest {
  return {
    modelName: "denoiser",
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [x],
    outputs: [],
    deviceOutputs: new Map([["y", 0]]),
  };
}

const stubTensor = (settled: Promise<unknown>[]): DeviceTensor => ({
  kind: "region",
  deviceId: 0,
  byteSize: 16,
  pointer: 0x9000n,
  event: new Uint8Array(64).fill(2),
  toHost: async () => new Uint8Array(16),
  settleAfter: (done) => settled.push(done),
  release: () => {},
});

const clientRegion: DeviceTensor = {
  kind: "region",
  deviceId: 0,
  byteSize: 16,
  pointer: 0xa000n,
  toHost: async () => new Uint8Array(16),
  release: () => {},
};

async function runOnce(x: Tensor, deferred: boolean, ready: Promise<void> = Promise.resolve()) {
  const batches = new TorchBatches(config, io, 0, undefined);
  const sent: TorchProtocol["batch"][] = [];
  const execute = async (batch: TorchProtocol["batch"]): Promise<TorchProtocol["result"]> => {
    sent.push(batch);
    const event = deferred && batch.defer ? new Uint8Array(64).fill(1) : null;
    return { outputs: [{ datatype: "FP32", shape: [4], tensor: kept(event, ready) }], inferNs: 1 };
  };
  const result = await batches.run([request(x)], execute, {
    name: "denoiser_0",
    log: { info: () => {}, warn: () => {}, verbose: () => {} },
    transfers: () => {},
    queued: false,
  });
  return { sent, result };
}

describe("a PyTorch batch on a GPU", () => {
  it("may be deferred when its inputs are a Python stub's tensors or host bytes, and waits for the stub's event", async () => {
    const settled: Promise<unknown>[] = [];
    const { sent, result } = await runOnce(input(stubTensor(settled)), true);
    expect(sent[0]?.defer).toBe(true);
    expect(sent[0]?.inputs[0]).toMatchObject({ pointer: 0x9000n, event: new Uint8Array(64).fill(2) });
    const output = (result.responses[0] as Tensor[])[0];
    expect(output?.device?.event).toEqual(new Uint8Array(64).fill(1));
    expect(settled).toHaveLength(1);
    expect((await runOnce(input(undefined), true)).sent[0]?.defer).toBe(true);
  });

  it("gives the stub's memory back only once the deferred work has ended", async () => {
    const settled: Promise<unknown>[] = [];
    let end = () => {};
    const ready = new Promise<void>((resolve) => (end = resolve));
    await runOnce(input(stubTensor(settled)), true, ready);
    let done = false;
    void settled[0]?.then(() => (done = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(done).toBe(false);
    end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(done).toBe(true);
  });

  it("is synchronised when it reads a client's CUDA region, which may be reused once answered", async () => {
    const { sent, result } = await runOnce(input(clientRegion), true);
    expect(sent[0]?.defer).toBeUndefined();
    expect((result.responses[0] as Tensor[])[0]?.device?.event).toBeUndefined();
  });

  it("settles nothing when the addon ran it synchronously after all", async () => {
    const settled: Promise<unknown>[] = [];
    const { sent } = await runOnce(input(stubTensor(settled)), false);
    expect(sent[0]?.defer).toBe(true);
    expect(settled).toEqual([]);
  });
});
