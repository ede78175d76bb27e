import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { InferenceRequest } from "../../base/inference-request.js";
import { createLogger } from "../../base/log.js";
import { createOrtHost, OrtInstance } from "./ort-instance.js";
import type { WireTensor } from "./ort-messages.js";

const SIMPLE = fileURLToPath(new URL("../../../../../examples/model_repository/simple/1/model.onnx", import.meta.url));

const feeds = (a: number, b: number): WireTensor[] => [
  { name: "INPUT0", type: "int32", dims: [1, 16], data: new Int32Array(16).fill(a) },
  { name: "INPUT1", type: "int32", dims: [1, 16], data: new Int32Array(16).fill(b) },
];

const outputs = (result: { outputs: WireTensor[] } | { error: string }) =>
  "error" in result ? result.error : Array.from(result.outputs[0]?.data as Int32Array);

describe("an ONNX Runtime session's host", () => {
  it("restarts a worker that dies: what it held fails, the next run works", async () => {
    const lines: string[] = [];
    const host = createOrtHost({
      name: "simple_0",
      model: "simple",
      path: SIMPLE,
      settings: { intraOpNumThreads: 1 },
      log: createLogger({ write: (l) => lines.push(l) }),
    });
    await host.start();
    try {
      expect(outputs(await host.execute({ feeds: feeds(2, 1), fetches: ["OUTPUT0"], hotWaitUs: 0 }))).toEqual(
        new Array(16).fill(3),
      );

      // A message the worker cannot handle makes it throw outside any run: the thread dies, as it
      // would on a native fault. (Not a transferred-away buffer: Node 22+ refuses to post those,
      // Node 20 posts them and the worker fails to read them.)
      host.post({ kind: "execute", batch: -1, payload: undefined } as never);
      const failure = await host.execute({ feeds: feeds(0, 0), fetches: ["OUTPUT0"], hotWaitUs: 0 }).then(
        () => undefined,
        (error: { id: string; code: string; message: string }) => [error.id, error.code, error.message],
      );
      expect(failure?.slice(0, 2)).toEqual(["BACKEND_FAILED", "INTERNAL"]);
      expect(failure?.[2]).toMatch(/^model instance 'simple_0' crashed: .+; the instance is restarting$/);
      expect(host.restarts).toBe(1);
      expect(lines.join("")).toMatch(/model instance 'simple_0' crashed: .+; restarting it\n/);

      // The first restart is immediate: runs sent while the fresh worker loads wait for it.
      expect(host.health).toBe("starting");
      const again = await Promise.all([
        host.execute({ feeds: feeds(5, 3), fetches: ["OUTPUT1"], hotWaitUs: 0 }),
        host.execute({ feeds: feeds(1, 1), fetches: ["OUTPUT0"], hotWaitUs: 0 }),
      ]);
      expect(again.map(outputs)).toEqual([new Array(16).fill(2), new Array(16).fill(2)]);
      expect(host.health).toBe("up");
    } finally {
      await host.close();
    }
    expect(host.health).toBe("closed");
    const closed = await host
      .execute({ feeds: feeds(1, 1), fetches: ["OUTPUT0"], hotWaitUs: 0 })
      .catch((error: Error) => error.message);
    expect(closed).toBe("model instance 'simple_0' was unloaded");
  });
});

describe("OrtInstance", () => {
  it("refuses BYTES that are not UTF-8 with an error from the table", async () => {
    const { fromModelConfigJson } = await import("@galley/config");
    const config = fromModelConfigJson({
      name: "simple",
      max_batch_size: 8,
      input: [
        { name: "INPUT0", data_type: "TYPE_STRING", dims: [16] },
        { name: "INPUT1", data_type: "TYPE_INT32", dims: [16] },
      ],
      output: [{ name: "OUTPUT0", data_type: "TYPE_INT32", dims: [16] }],
    });
    const instance = await OrtInstance.start({
      name: "simple_0",
      config,
      path: SIMPLE,
      settings: { intraOpNumThreads: 1 },
      log: createLogger({ write: () => undefined }),
    });
    try {
      const bad = new Uint8Array([1, 0, 0, 0, 0xff]);
      const request: InferenceRequest = {
        modelName: "simple",
        modelVersion: "",
        id: "",
        parameters: {},
        inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1, 1], data: bad, parameters: {} }],
        outputs: [],
      };
      const result = await instance.execute([request]);
      const error = result.responses[0] as Error & { id: string; code: string };
      expect([error.id, error.code, error.message]).toEqual([
        "ORT_BYTES_NOT_UTF8",
        "INVALID_ARG",
        "BYTES input 'INPUT0' is not valid UTF-8; onnxruntime string tensors hold text",
      ]);
      expect(instance.healthy).toBe(true);
    } finally {
      await instance.close();
    }
  });
});

describe("where an OrtInstance runs its batches", () => {
  const simpleConfig = async () => {
    const { fromModelConfigJson } = await import("@galley/config");
    return fromModelConfigJson({
      name: "simple",
      max_batch_size: 8,
      input: [
        { name: "INPUT0", data_type: "TYPE_INT32", dims: [16] },
        { name: "INPUT1", data_type: "TYPE_INT32", dims: [16] },
      ],
      output: [
        { name: "OUTPUT0", data_type: "TYPE_INT32", dims: [16] },
        { name: "OUTPUT1", data_type: "TYPE_INT32", dims: [16] },
      ],
    });
  };
  const request = (a: number, b: number, rows = 1): InferenceRequest => ({
    modelName: "simple",
    modelVersion: "",
    id: "",
    parameters: {},
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [rows, 16], data: bytes(a, rows), parameters: {} },
      { name: "INPUT1", datatype: "INT32", shape: [rows, 16], data: bytes(b, rows), parameters: {} },
    ],
    outputs: [],
  });
  const bytes = (v: number, rows: number) => new Uint8Array(new Int32Array(16 * rows).fill(v).buffer);
  const values = (result: Awaited<ReturnType<OrtInstance["execute"]>>, i = 0) =>
    (result.responses[i] as { name: string; data: Uint8Array }[]).map((t) => [
      t.name,
      Array.from(new Int32Array(t.data.slice().buffer)),
    ]);

  it("runs a model as small as simple on the event loop, without a worker thread", async () => {
    const instance = await OrtInstance.start({
      name: "simple_0",
      config: await simpleConfig(),
      path: SIMPLE,
      settings: { intraOpNumThreads: 1 },
      log: createLogger({ write: () => undefined }),
      // simple runs in about 20 µs; a budget this wide keeps the test independent of the machine's load.
      inlineMaxRunUs: 5000,
    });
    try {
      expect(instance.placement).toBe("inline");
      expect(instance.io.inputs.map((i) => [i.name, i.type])).toEqual([
        ["INPUT0", "int32"],
        ["INPUT1", "int32"],
      ]);
      const result = await instance.execute([request(5, 3), request(1, 1, 2)]);
      expect(values(result, 0)).toEqual([
        ["OUTPUT0", new Array(16).fill(8)],
        ["OUTPUT1", new Array(16).fill(2)],
      ]);
      expect(values(result, 1)).toEqual([
        ["OUTPUT0", new Array(32).fill(2)],
        ["OUTPUT1", new Array(32).fill(0)],
      ]);
      expect(result.computeInferNs).toBeGreaterThan(0n);
      expect(instance.hasWorker).toBe(false);
    } finally {
      await instance.close();
    }
  });

  it("runs every batch in a worker thread with inline_max_run_us 0", async () => {
    const instance = await OrtInstance.start({
      name: "simple_0",
      config: await simpleConfig(),
      path: SIMPLE,
      settings: { intraOpNumThreads: 1 },
      log: createLogger({ write: () => undefined }),
      inlineMaxRunUs: 0,
    });
    try {
      expect(instance.placement).toBe("worker");
      expect(instance.hasWorker).toBe(true);
      const result = await instance.execute([request(7, 2)]);
      expect(values(result)).toEqual([
        ["OUTPUT0", new Array(16).fill(9)],
        ["OUTPUT1", new Array(16).fill(5)],
      ]);
    } finally {
      await instance.close();
    }
  });

  const workerInstance = async (workerHotWaitUs: number) =>
    OrtInstance.start({
      name: "simple_0",
      config: await simpleConfig(),
      path: SIMPLE,
      settings: { intraOpNumThreads: 1 },
      log: createLogger({ write: () => undefined }),
      inlineMaxRunUs: 0,
      workerHotWaitUs,
    });

  it("its worker waits hot after a batch of one request: the next is taken without a wake-up", async () => {
    // A window far wider than the gaps between these calls: only a broken wait misses one.
    const instance = await workerInstance(30_000_000);
    try {
      for (let i = 0; i < 5; i++) {
        expect(values(await instance.execute([request(i, 1)]))[0]).toEqual(["OUTPUT0", new Array(16).fill(i + 1)]);
      }
      // The first batch came to a sleeping thread; each later one was taken while it waited.
      expect(instance.hotBatches).toBe(4);
      // A batch of two requests (taken hot) is not followed by a wait; the one after it is.
      await instance.execute([request(1, 1), request(2, 2)]);
      expect(instance.hotBatches).toBe(5);
      await instance.execute([request(3, 3)]);
      expect(instance.hotBatches).toBe(5);
      await instance.execute([request(4, 4)]);
      expect(instance.hotBatches).toBe(6);
    } finally {
      // The stop is taken by the wait, which then ends: the close does not wait out the window.
      await instance.close();
    }
  });

  it("its worker does not wait hot after a gap longer than the window, nor with worker_hot_wait_us 0", async () => {
    // Half a second: the gaps between these awaited calls stay far below it even on a loaded machine.
    const instance = await workerInstance(500_000);
    try {
      await instance.execute([request(1, 1)]);
      await instance.execute([request(1, 1)]);
      expect(instance.hotBatches).toBe(1);
      // A pause longer than the window: that batch comes to a sleeping thread, and since the gap
      // before it was longer than the window, the thread sleeps after it too.
      await new Promise((resolve) => setTimeout(resolve, 800));
      await instance.execute([request(1, 1)]);
      await instance.execute([request(1, 1)]);
      expect(instance.hotBatches).toBe(1);
      // The gap before that one was short again: the next is taken hot.
      await instance.execute([request(1, 1)]);
      expect(instance.hotBatches).toBe(2);
    } finally {
      await instance.close();
    }
    const never = await workerInstance(0);
    try {
      for (let i = 0; i < 3; i++) await never.execute([request(1, 1)]);
      expect(never.hotBatches).toBe(0);
    } finally {
      await never.close();
    }
  });

  it("fails the start with onnxruntime's message for a file that is not a model", async () => {
    const { mkdtemp, writeFile, rm } = await import("node:fs/promises");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = await mkdtemp(join(tmpdir(), "galley-ort-"));
    try {
      await writeFile(join(dir, "model.onnx"), "not a model");
      const start = OrtInstance.start({
        name: "broken_0",
        config: await simpleConfig(),
        path: join(dir, "model.onnx"),
        settings: { intraOpNumThreads: 1 },
        log: createLogger({ write: () => undefined }),
      });
      await expect(start).rejects.toThrow(/protobuf|parse|model/i);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
