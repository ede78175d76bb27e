// Decoupled Python models (response senders, the final flag, cancellation) over gRPC streams and
// generate_stream, and BLS from Python into Python, ONNX and decoupled models.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { ModelInferRequestSchema, ModelStreamInferResponse } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { postJson } from "./http-fixture.js";
import { copyPythonModels, pythonWithNumpy, stubProcesses } from "./python-harness.js";
import {
  bytesTensor,
  cleanup,
  fp32Bytes,
  type InferenceClient,
  pushable,
  readBytesTensor,
  readFp32,
  readInt32,
  recordingLog,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

type Init = MessageInitShape<typeof ModelInferRequestSchema>;

function repeat(values: number[], delayMs = 0, id = ""): Init {
  return {
    modelName: "repeat_int32",
    id,
    inputs: [
      { name: "IN", datatype: "INT32", shape: [BigInt(values.length)] },
      { name: "DELAY", datatype: "UINT32", shape: [1n] },
    ],
    rawInputContents: [new Uint8Array(Int32Array.from(values).buffer), new Uint8Array(Uint32Array.of(delayMs).buffer)],
  };
}

const finalFlag = (r: ModelStreamInferResponse) =>
  r.inferResponse?.parameters.triton_final_response?.parameterChoice.value;
const out = (r: ModelStreamInferResponse, name: string) => {
  const at = r.inferResponse?.outputs.findIndex((o) => o.name === name) ?? -1;
  return readInt32(r.inferResponse?.rawOutputContents[at])[0];
};

async function streamAll(client: InferenceClient, requests: Init[]) {
  const input = pushable<Init>();
  for (const r of requests) input.push(r);
  input.end();
  const responses: ModelStreamInferResponse[] = [];
  for await (const r of client.modelStreamInfer(input)) responses.push(r);
  return responses;
}

async function pythonServer(models: string[], extra: Parameters<typeof startServer>[0] = {}) {
  const repo = tempRepository();
  copyPythonModels(repo, models);
  const running = await startServer({ modelRepositories: [repo], pythonExecutable: python, ...extra });
  expect(running.failedModels).toEqual([]);
  return { ...running, repo };
}

describe("a decoupled Python model", () => {
  it("streams one response per send over ModelStreamInfer, in order, then ends with the final flag", async () => {
    const { client } = await pythonServer(["repeat_int32"]);
    const responses = await streamAll(client, [repeat([4, 2, 0, 1], 0, "a"), repeat([9], 0, "b")]);
    const a = responses.filter((r) => r.inferResponse?.id === "a");
    expect(responses.map((r) => r.errorMessage).filter(Boolean)).toEqual([]);
    expect(a.map((r) => out(r, "OUT"))).toEqual([4, 2, 0, 1]);
    expect(a.map((r) => out(r, "IDX"))).toEqual([0, 1, 2, 3]);
    expect(a.map(finalFlag)).toEqual([false, false, false, false]);
    expect(responses.filter((r) => r.inferResponse?.id === "b").map((r) => out(r, "OUT"))).toEqual([9]);
  });

  it("streams over generate_stream as server-sent events", async () => {
    const { httpUrl } = await pythonServer(["repeat_int32"], { http: true });
    const port = Number(new URL(httpUrl ?? "").port);
    const reply = await postJson(port, "/v2/models/repeat_int32/generate_stream", { IN: [5, 6, 7], DELAY: [0] });
    expect(reply.status).toBe(200);
    const events = reply.text
      .split("\n\n")
      .filter(Boolean)
      .map((e) => JSON.parse(e.replace(/^data: /, "")));
    expect(events.map((e) => e.OUT)).toEqual([5, 6, 7]);
    expect(events.map((e) => e.IDX)).toEqual([0, 1, 2]);
  });

  it("sees the client's cancellation in is_cancelled() and stops sending", async () => {
    const { log, lines } = recordingLog();
    const { client } = await pythonServer(["repeat_int32"], { log });
    const abort = new AbortController();
    const input = pushable<Init>();
    input.push(
      repeat(
        Array.from({ length: 1000 }, (_, i) => i),
        10,
      ),
    );
    const received: number[] = [];
    const reading = (async () => {
      for await (const r of client.modelStreamInfer(input, { signal: abort.signal })) {
        received.push(out(r, "OUT") as number);
        if (received.length === 3) abort.abort();
      }
    })().catch((error: unknown) => error);
    expect(await reading).toBeInstanceOf(ConnectError);
    const line = await waitFor(() => lines.find((l) => l.includes("repeat_int32 cancelled after")), {
      what: "the model to see the cancellation",
    });
    const sent = Number(/cancelled after (\d+) responses/.exec(line)?.[1]);
    expect(sent).toBeGreaterThanOrEqual(3);
    expect(sent).toBeLessThan(100);
    input.end();
  });

  it("refuses unary ModelInfer, as for any decoupled model", async () => {
    const { client } = await pythonServer(["repeat_int32"]);
    await expect(client.modelInfer(repeat([1]))).rejects.toBeInstanceOf(ConnectError);
  });
});

describe("BLS from a Python model", () => {
  async function blsServer() {
    const running = await pythonServer(["bls", "add_sub", "repeat_int32"]);
    return running;
  }

  async function bls(client: InferenceClient, mode: string, a = [1, 2, 3, 4], b = [10, 20, 30, 40]) {
    const reply = await client.modelInfer({
      modelName: "bls",
      inputs: [
        { name: "MODE", datatype: "BYTES", shape: [1n] },
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [bytesTensor([mode]), fp32Bytes(a), fp32Bytes(b)],
    });
    return {
      out0: readFp32(reply.rawOutputContents[0]),
      out1: readFp32(reply.rawOutputContents[1]),
      info: JSON.parse(readBytesTensor(reply.rawOutputContents[2])[0] ?? "{}"),
    };
  }

  it("exec() calls another Python model through the server and reads its outputs", async () => {
    const { client } = await blsServer();
    const r = await bls(client, "sync");
    expect(r.out0).toEqual([11, 22, 33, 44]);
    expect(r.out1).toEqual([-9, -18, -27, -36]);
  });

  it("takes bytes for the model name, output names, tensor names and request id, as Triton's bindings do", async () => {
    const { client } = await blsServer();
    const r = await bls(client, "bytes");
    expect(r.out0).toEqual([11, 22, 33, 44]);
    expect(r.out1).toEqual([-9, -18, -27, -36]);
  });

  it("await async_exec() runs calls in parallel from an async execute", async () => {
    const { client } = await blsServer();
    const r = await bls(client, "async");
    expect(r.out0).toEqual([11, 22, 33, 44]);
    expect(r.out1).toEqual([9, 18, 27, 36]);
  });

  it("calls an ONNX model (simple) and gets only the requested outputs", async () => {
    const repo = tempRepository(["simple"]);
    copyPythonModels(repo, ["bls", "add_sub", "repeat_int32"]);
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    const r = await bls(client, "simple");
    expect(r.info.simple).toEqual([Array.from({ length: 16 }, (_, i) => i + 1)]);
    expect(r.info.outputs).toEqual(["OUTPUT0"]);
  });

  it("exec(decoupled=True) iterates a decoupled model's responses, the last one empty and final", async () => {
    const { client } = await blsServer();
    const r = await bls(client, "stream");
    expect(r.info.stream).toEqual([7, 8, 9, "final"]);
  });

  it("cancel() on a decoupled call's iterator cancels the callee, which ends the stream", async () => {
    const { log, lines } = recordingLog();
    const { client } = await pythonServer(["bls", "add_sub", "repeat_int32"], { log });
    const r = await bls(client, "stream-cancel");
    expect(r.info.received).toBeGreaterThanOrEqual(2);
    expect(r.info.received).toBeLessThan(500);
    await waitFor(() => lines.some((l) => l.includes("repeat_int32 cancelled after")), {
      what: "the callee to see it",
    });
  });

  it("after cancel(), a callee that ignores it answers on to its final response, as in Triton (sync and async_exec)", async () => {
    const { client } = await pythonServer(["bls_cancel", "until_cancelled"]);
    const run = async (ignoreCancel: boolean, useAsync: boolean) => {
      const reply = await client.modelInfer({
        modelName: "bls_cancel",
        inputs: [
          { name: "IGNORE_CANCEL", datatype: "BOOL", shape: [1n] },
          { name: "ASYNC", datatype: "BOOL", shape: [1n] },
        ],
        rawInputContents: [Uint8Array.of(ignoreCancel ? 1 : 0), Uint8Array.of(useAsync ? 1 : 0)],
      });
      return { sum: readInt32(reply.rawOutputContents[0])[0] ?? 0, cancelled: reply.rawOutputContents[1]?.[0] === 1 };
    };
    for (const useAsync of [false, true]) {
      // Heeded: the callee ends with CANCELLED once it sees it (a response or so may cross the
      // cancel); ignored: all ten come, the last with the final flag.
      const heeded = await run(false, useAsync);
      expect(heeded.cancelled, `async=${useAsync}`).toBe(true);
      expect(heeded.sum).toBeGreaterThanOrEqual(3);
      expect(heeded.sum).toBeLessThan(10);
      expect(await run(true, useAsync), `async=${useAsync}`).toEqual({ sum: 10, cancelled: false });
    }
  });

  it("await async_exec(decoupled=True) resolves once the first response has come: iterating it does not block the loop", async () => {
    const { client } = await pythonServer(["bls_async_wait", "until_cancelled"]);
    const wait = (ms: number, id: string): Init => ({
      modelName: "bls_async_wait",
      id,
      inputs: [{ name: "WAIT", datatype: "INT32", shape: [1n] }],
      rawInputContents: [new Uint8Array(Int32Array.of(ms).buffer)],
    });
    const started = performance.now();
    // Four requests to one instance whose coroutines overlap: together about one wait, not four.
    const responses = await streamAll(
      client,
      ["a", "b", "c", "d"].map((id) => wait(1500, id)),
    );
    const elapsed = performance.now() - started;
    expect(responses.map((r) => r.errorMessage).filter(Boolean)).toEqual([]);
    expect(
      responses
        .filter((r) => r.inferResponse?.outputs.length)
        .map((r) => r.inferResponse?.id)
        .sort(),
    ).toEqual(["a", "b", "c", "d"]);
    expect(elapsed).toBeLessThan(4000);
  });

  it("returns a failed call as a response with has_error() and error().message()", async () => {
    const { client } = await blsServer();
    const r = await bls(client, "missing");
    expect(r.info.has_error).toBe(true);
    expect(r.info.message).toContain("nonexistent");
    expect(r.info.code).toBe(2);
  });

  it("leaves one process per instance after many calls", async () => {
    const { client } = await blsServer();
    await Promise.all(Array.from({ length: 10 }, () => bls(client, "sync")));
    expect(stubProcesses().filter((p) => p.ppid === process.pid)).toHaveLength(3);
  });
});
