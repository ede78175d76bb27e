import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../log.js";
import { OrtSession } from "./ort-instance.js";
import type { WireTensor } from "./ort-messages.js";

const SIMPLE = fileURLToPath(new URL("../../../../../examples/model_repository/simple/1/model.onnx", import.meta.url));

const feeds = (a: number, b: number): WireTensor[] => [
  { name: "INPUT0", type: "int32", dims: [1, 16], data: new Int32Array(16).fill(a) },
  { name: "INPUT1", type: "int32", dims: [1, 16], data: new Int32Array(16).fill(b) },
];

describe("OrtSession", () => {
  it("restarts a worker that dies: what it held fails, the next run works", async () => {
    const lines: string[] = [];
    const session = await OrtSession.open(
      "simple_0",
      SIMPLE,
      { intraOpNumThreads: 1 },
      createLogger({ write: (l) => lines.push(l) }),
    );
    try {
      const first = await session.run(feeds(2, 1), ["OUTPUT0"], []);
      expect(Array.from(first.outputs[0]?.data as Int32Array)).toEqual(new Array(16).fill(3));

      // A buffer moved away before the run: the worker receives a message it cannot read.
      const moved = new Int32Array(16);
      structuredClone(moved.buffer, { transfer: [moved.buffer] });
      const broken = feeds(0, 0);
      (broken[0] as WireTensor).data = moved;
      const failure = await session.run(broken, ["OUTPUT0"], [moved.buffer as ArrayBuffer]).then(
        () => undefined,
        (error: Error) => error.message,
      );
      expect(failure).toBe(
        "instance simple_0 failed: a message from the server could not be read: Unable to deserialize cloned data.; the instance is restarting",
      );
      expect(session.restarts).toBe(1);
      expect(lines.join("")).toContain(
        "onnxruntime instance simple_0 failed: a message from the server could not be read",
      );

      // Runs sent while the fresh worker loads wait for it.
      const again = await Promise.all([
        session.run(feeds(5, 3), ["OUTPUT1"], []),
        session.run(feeds(1, 1), ["OUTPUT0"], []),
      ]);
      expect(Array.from(again[0].outputs[0]?.data as Int32Array)).toEqual(new Array(16).fill(2));
      expect(Array.from(again[1].outputs[0]?.data as Int32Array)).toEqual(new Array(16).fill(2));
    } finally {
      await session.close();
    }
  });
});
