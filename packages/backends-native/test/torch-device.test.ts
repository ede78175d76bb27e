// The galley_torch addon's device path on CPU (issue 19): kept ("resident") outputs as handles,
// handed back as inputs, batches concatenated by the addon, and the checks on device inputs that
// need no GPU to fail (device memory given to a CPU model, foreign or disposed handles, sizes).
// The GPU side of the same path runs in test/gpu/device-tensors-gpu.mjs.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadTorchModel, type TorchDeviceTensor, type TorchModel } from "../src/torch.js";

const FIXTURES = fileURLToPath(new URL("../../server/test/fixtures/pytorch/", import.meta.url));
const f32 = (values: number[]) => new Uint8Array(Float32Array.from(values).buffer);
const readF32 = (bytes: Uint8Array) => Array.from(new Float32Array(bytes.slice().buffer));

describe("galley_torch kept tensors", () => {
  let addSub: TorchModel;
  let identity: TorchModel;
  beforeAll(async () => {
    addSub = await loadTorchModel(join(FIXTURES, "add_sub.pt"));
    identity = await loadTorchModel(join(FIXTURES, "identity.pt"));
  });
  afterAll(async () => {
    await addSub.close();
    await identity.close();
  });

  it("keeps the outputs asked for as handles, returns the others as bytes, and counts no host copies on CPU", async () => {
    const result = await addSub.execute(
      [
        { datatype: "FP32", shape: [2, 2], data: f32([1, 2, 3, 4]) },
        { datatype: "FP32", shape: [2, 2], data: f32([10, 20, 30, 40]) },
      ],
      { resident: [1] },
    );
    expect(result.hostToDeviceBytes).toBe(0);
    expect(result.deviceToHostBytes).toBe(0);
    const [sum, diff] = result.outputs;
    expect(readF32(sum?.data ?? new Uint8Array())).toEqual([11, 22, 33, 44]);
    expect(diff?.data).toBeUndefined();
    const handle = (diff as { tensor: TorchDeviceTensor }).tensor;
    expect([handle.deviceId, handle.byteSize, handle.datatype, handle.shape, handle.disposed]).toEqual([
      -1,
      16,
      "FP32",
      [2, 2],
      false,
    ]);
    expect(readF32(await handle.toHost())).toEqual([-9, -18, -27, -36]);
    // Complete when answered (no deferred GPU work): no event, and nothing to wait for.
    expect(handle.readyEvent).toBeNull();
    await expect(handle.whenReady()).resolves.toBeUndefined();
    const row = handle.narrow(1, 1);
    expect(row.shape).toEqual([1, 2]);
    expect(readF32(await row.toHost())).toEqual([-27, -36]);
    expect(() => handle.narrow(1, 2)).toThrow(/out of range/);
    expect(() => handle.narrow(-1, 1)).toThrow(/out of range/);
    // Not on a GPU: there is no device memory to copy into.
    expect(() => handle.copyTo(1n, 16)).toThrow(/not on a GPU/);
    handle.dispose();
    expect(handle.disposed).toBe(true);
    await expect(async () => handle.toHost()).rejects.toThrow(/disposed/);
    // The view keeps the storage alive on its own.
    expect(readF32(await row.toHost())).toEqual([-27, -36]);
  });

  it("takes a kept tensor back as an input, reshaped, and concatenates parts of a batch", async () => {
    const first = await identity.execute([{ datatype: "FP32", shape: [2], data: f32([1, 2]) }], { resident: [0] });
    const kept = (first.outputs[0] as { tensor: TorchDeviceTensor }).tensor;
    const second = await addSub.execute([
      { datatype: "FP32", shape: [1, 2], tensor: kept },
      { datatype: "FP32", shape: [1, 2], data: f32([10, 10]) },
    ]);
    expect(second.outputs.map((o) => readF32(o.data ?? new Uint8Array()))).toEqual([
      [11, 12],
      [-9, -8],
    ]);
    const batch = await identity.execute([
      {
        datatype: "FP32",
        shape: [3, 2],
        parts: [
          { datatype: "FP32", shape: [1, 2], tensor: kept },
          { datatype: "FP32", shape: [2, 2], data: f32([3, 4, 5, 6]) },
        ],
      },
    ]);
    expect(batch.outputs[0]?.shape).toEqual([3, 2]);
    expect(readF32(batch.outputs[0]?.data ?? new Uint8Array())).toEqual([1, 2, 3, 4, 5, 6]);
    // An identity model's kept output over a batch the addon made is still readable after it.
    const kept2 = await identity.execute([{ datatype: "FP32", shape: [1, 2], tensor: kept }], { resident: [0] });
    expect(readF32(await (kept2.outputs[0] as { tensor: TorchDeviceTensor }).tensor.toHost())).toEqual([1, 2]);
    kept.dispose();
  });

  it("refuses device memory on a CPU model, foreign or disposed handles, and sizes that do not fit", async () => {
    const pointer = { datatype: "FP32", shape: [4], pointer: 4096n, deviceId: 0, byteLength: 16 };
    expect(() => identity.execute([pointer])).toThrow(/needs a GPU instance, this one runs on the CPU/);
    expect(() => identity.execute([{ ...pointer, pointer: 4096 as unknown as bigint }])).toThrow(/bigint/);
    const fake = { deviceId: 0, byteSize: 16, datatype: "FP32", shape: [4] } as unknown as TorchDeviceTensor;
    expect(() => identity.execute([{ datatype: "FP32", shape: [4], tensor: fake }])).toThrow(
      /not a device tensor of this addon/,
    );
    const out = await identity.execute([{ datatype: "FP32", shape: [4], data: f32([1, 2, 3, 4]) }], {
      resident: [0],
    });
    const handle = (out.outputs[0] as { tensor: TorchDeviceTensor }).tensor;
    expect(() => identity.execute([{ datatype: "FP32", shape: [5], tensor: handle }])).toThrow(/16 bytes do not fit/);
    expect(() => identity.execute([{ datatype: "INT32", shape: [4], tensor: handle }])).toThrow(/is FP32, not INT32/);
    handle.dispose();
    expect(() => identity.execute([{ datatype: "FP32", shape: [4], tensor: handle }])).toThrow(/disposed/);
    expect(() =>
      identity.execute([
        { datatype: "FP32", shape: [3, 1], parts: [{ datatype: "FP32", shape: [1, 1], data: f32([1]) }] },
      ]),
    ).toThrow(/do not add up/);
    expect(() => identity.execute([{ datatype: "FP32", shape: [-1], data: f32([1]) }])).toThrow(
      /non-negative integers/,
    );
    expect(() => identity.execute([{ datatype: "FP32", shape: [1], data: f32([1]) }], { resident: [-1] })).toThrow(
      /resident output positions/,
    );
  });
});
