import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { InferenceRequest } from "../../core/inference-request.js";
import { createLogger } from "../../log.js";
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
      expect(outputs(await host.execute({ feeds: feeds(2, 1), fetches: ["OUTPUT0"] }))).toEqual(new Array(16).fill(3));

      // A message the worker cannot handle makes it throw outside any run: the thread dies, as it
      // would on a native fault. (Not a transferred-away buffer: Node 22+ refuses to post those,
      // Node 20 posts them and the worker fails to read them.)
      host.post({ kind: "execute", batch: -1, payload: undefined } as never);
      const failure = await host.execute({ feeds: feeds(0, 0), fetches: ["OUTPUT0"] }).then(
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
        host.execute({ feeds: feeds(5, 3), fetches: ["OUTPUT1"] }),
        host.execute({ feeds: feeds(1, 1), fetches: ["OUTPUT0"] }),
      ]);
      expect(again.map(outputs)).toEqual([new Array(16).fill(2), new Array(16).fill(2)]);
      expect(host.health).toBe("up");
    } finally {
      await host.close();
    }
    expect(host.health).toBe("closed");
    const closed = await host
      .execute({ feeds: feeds(1, 1), fetches: ["OUTPUT0"] })
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
