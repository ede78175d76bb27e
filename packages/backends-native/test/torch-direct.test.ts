// torchDirect(): a worker thread runs a model the main thread loaded, through the model's own
// native thread, with real workers and the server's TorchScript fixtures (CPU libtorch).
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { loadTorchModel, type TorchModel, torchDirect } from "../src/torch.js";

const FIXTURES = fileURLToPath(new URL("../../server/test/fixtures/pytorch/", import.meta.url));
const DIST = new URL("../dist/torch.js", import.meta.url).href;
const f32 = (values: number[]) => new Uint8Array(Float32Array.from(values).buffer);

/**
 * A worker that imports the built wrappers and runs `body` (an async function's source, given
 * `direct`, `workerData` and `f32`); its result or error comes back as the one message.
 */
function inWorker(body: string, workerData: unknown): { worker: Worker; result: Promise<unknown> } {
  const source = `
    const { parentPort, workerData } = require("node:worker_threads");
    const f32 = (v) => new Uint8Array(Float32Array.from(v).buffer);
    import(${JSON.stringify(DIST)}).then(async ({ torchDirect }) => {
      const direct = torchDirect();
      try { parentPort.postMessage({ ok: await (${body})(direct, workerData, f32) }); }
      catch (error) { parentPort.postMessage({ error: { message: error.message, code: error.code, name: error.name } }); }
    });`;
  const worker = new Worker(source, { eval: true, workerData });
  const result = new Promise((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
  });
  return { worker, result };
}

const models: TorchModel[] = [];
async function load(name: string): Promise<TorchModel> {
  const model = await loadTorchModel(join(FIXTURES, name));
  models.push(model);
  return model;
}
const workers: Worker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.terminate()));
  await Promise.all(models.splice(0).map((m) => m.close()));
});

describe("torchDirect", () => {
  it("runs a model the main thread loaded from a worker, with the main thread's answers", async () => {
    const model = await load("add_sub.pt");
    const { worker, result } = inWorker(
      `async (direct, { id }, f32) => {
        const r = await direct.execute(id, [
          { datatype: "FP32", shape: [2, 2], data: f32([1, 2, 3, 4]) },
          { datatype: "FP32", shape: [2, 2], data: f32([10, 20, 30, 40]) },
        ]);
        return { inferNs: r.inferNs, outputs: r.outputs.map((o) => [o.datatype, o.shape, Array.from(new Float32Array(o.data.slice().buffer))]) };
      }`,
      { id: model.id },
    );
    workers.push(worker);
    const here = await model.execute([
      { datatype: "FP32", shape: [2, 2], data: f32([1, 2, 3, 4]) },
      { datatype: "FP32", shape: [2, 2], data: f32([10, 20, 30, 40]) },
    ]);
    const { ok } = (await result) as { ok: { inferNs: number; outputs: unknown[] } };
    expect(ok.inferNs).toBeGreaterThan(0);
    expect(ok.outputs).toEqual(
      here.outputs.map((o) => [
        o.datatype,
        o.shape,
        Array.from(new Float32Array((o.data as Uint8Array).slice().buffer)),
      ]),
    );
    expect(ok.outputs).toEqual([
      ["FP32", [2, 2], [11, 22, 33, 44]],
      ["FP32", [2, 2], [-9, -18, -27, -36]],
    ]);
  });

  it("keeps outputs as this worker's handles (resident), which its next calls take as inputs", async () => {
    const model = await load("add_sub.pt");
    const { worker, result } = inWorker(
      `async (direct, { id }, f32) => {
        const first = await direct.execute(id, [
          { datatype: "FP32", shape: [2], data: f32([1, 2]) },
          { datatype: "FP32", shape: [2], data: f32([10, 20]) },
        ], { resident: [0] });
        const [sum, difference] = first.outputs;
        // The kept sum back in, twice: (11, 22) + (11, 22), its bytes never in this thread.
        const second = await direct.execute(id, [
          { datatype: "FP32", shape: [2], tensor: sum.tensor },
          { datatype: "FP32", shape: [2], tensor: sum.tensor.narrow(0, 2) },
        ], { resident: [1] });
        const host = await sum.tensor.toHost();
        sum.tensor.dispose();
        return {
          kept: { deviceId: sum.tensor.deviceId, disposed: sum.tensor.disposed, hasData: "data" in sum && sum.data !== undefined },
          sum: Array.from(new Float32Array(host.slice().buffer)),
          difference: Array.from(new Float32Array(difference.data.slice().buffer)),
          twice: Array.from(new Float32Array(second.outputs[0].data.slice().buffer)),
          zero: Array.from(new Float32Array((await second.outputs[1].tensor.toHost()).slice().buffer)),
        };
      }`,
      { id: model.id },
    );
    workers.push(worker);
    expect(await result).toEqual({
      ok: {
        kept: { deviceId: -1, disposed: true, hasData: false },
        sum: [11, 22],
        difference: [-9, -18],
        twice: [22, 44],
        zero: [0, 0],
      },
    });
  });

  it("refuses resident positions that are no small whole numbers, as execute does", async () => {
    const model = await load("identity.pt");
    const input = { datatype: "FP32", shape: [1], data: f32([1]) };
    for (const bad of [-1, 1.5, 70000]) {
      expect(() => torchDirect().execute(model.id, [input], { resident: [bad] })).toThrow(
        /resident output positions must be small non-negative integers/,
      );
    }
  });

  it("refuses an id that is no open model, and one that is not an id", async () => {
    const model = await load("identity.pt");
    const id = model.id;
    await model.close();
    models.splice(0);
    const direct = torchDirect();
    await expect(direct.execute(id, [{ datatype: "FP32", shape: [1], data: f32([1]) }])).rejects.toMatchObject({
      code: "TORCH_INSTANCE_CLOSED",
      message: "the libtorch instance is closed",
    });
    await expect(direct.execute(2 ** 31, [])).rejects.toMatchObject({ code: "TORCH_INSTANCE_CLOSED" });
    for (const bad of [0, -1, 1.5, Number.NaN, 2 ** 32, "1" as unknown as number]) {
      expect(() => direct.execute(bad, [])).toThrow(/id must be a libtorch instance's id/);
    }
  });

  it("checks inputs as execute does, synchronously, and reports the model's own error", async () => {
    const model = await load("throws.pt");
    const direct = torchDirect();
    expect(() => direct.execute(model.id, [{ datatype: "FP32", shape: [2], data: f32([1]) }])).toThrow(
      /4 bytes do not fit its shape and datatype/,
    );
    expect(() => direct.execute(model.id, [{ datatype: "UINT64", shape: [1], data: new Uint8Array(8) }])).toThrow(
      /libtorch has no UINT64 type/,
    );
    await expect(direct.execute(model.id, [{ datatype: "FP32", shape: [1], data: f32([-1]) }])).rejects.toThrow(
      /negative input is not allowed/,
    );
    const ok = await direct.execute(model.id, [{ datatype: "FP32", shape: [1], data: f32([3]) }]);
    expect(ok.outputs).toHaveLength(1);
  });

  it("reads its inputs without holding the registry: a getter that closes the model gets a refusal, not a deadlock", async () => {
    const model = await load("identity.pt");
    let closing: Promise<void> | undefined;
    const input = {
      datatype: "FP32",
      shape: [1],
      get data() {
        closing ??= model.close();
        return f32([1]);
      },
    };
    await expect(torchDirect().execute(model.id, [input])).rejects.toMatchObject({ code: "TORCH_INSTANCE_CLOSED" });
    await closing;
    models.splice(0);
  });

  it("runs calls queued before the model's close, and refuses those after", async () => {
    const model = await load("add_sub.pt");
    const direct = torchDirect();
    const big = new Uint8Array(4 * 1024 * 1024);
    const before = direct.execute(model.id, [
      { datatype: "FP32", shape: [1024, 1024], data: big },
      { datatype: "FP32", shape: [1024, 1024], data: big },
    ]);
    const closing = model.close();
    models.splice(0);
    const after = expect(direct.execute(model.id, [{ datatype: "FP32", shape: [1], data: f32([1]) }])).rejects;
    await after.toMatchObject({ code: "TORCH_INSTANCE_CLOSED" });
    await expect(before).resolves.toMatchObject({ outputs: [{ shape: [1024, 1024] }, { shape: [1024, 1024] }] });
    await closing;
  });

  it("a worker that ends while its call runs waits for it; the model and the process go on", async () => {
    const model = await load("add_sub.pt");
    const { worker, result } = inWorker(
      `async (direct, { id }) => {
        const big = new Uint8Array(64 * 1024 * 1024).fill(1);
        const input = { datatype: "FP32", shape: [4096, 4096], data: big };
        for (let i = 0; i < 4; i++) direct.execute(id, [input, input]);
        process.exit(3);
      }`,
      { id: model.id },
    );
    const exit = new Promise<number>((resolve) => worker.once("exit", resolve));
    void result.catch(() => undefined);
    expect(await exit).toBe(3);
    const { outputs } = await model.execute([
      { datatype: "FP32", shape: [1], data: f32([2]) },
      { datatype: "FP32", shape: [1], data: f32([5]) },
    ]);
    expect(Array.from(new Float32Array((outputs[0]?.data ?? new Uint8Array()).slice().buffer))).toEqual([7]);
  });

  it("keeps calls from several workers apart", async () => {
    const model = await load("add_sub.pt");
    const runs = [1, 2, 3, 4].map((k) =>
      inWorker(
        `async (direct, { id, k }, f32) => {
          const sums = [];
          for (let i = 0; i < 50; i++) {
            const r = await direct.execute(id, [{ datatype: "FP32", shape: [1], data: f32([k]) }, { datatype: "FP32", shape: [1], data: f32([i]) }]);
            sums.push(new Float32Array(r.outputs[0].data.slice().buffer)[0]);
          }
          return sums;
        }`,
        { id: model.id, k },
      ),
    );
    workers.push(...runs.map((r) => r.worker));
    const all = (await Promise.all(runs.map((r) => r.result))) as { ok: number[] }[];
    all.forEach(({ ok }, w) => {
      expect(ok).toEqual(Array.from({ length: 50 }, (_, i) => w + 1 + i));
    });
  });
});
