// Triton's iterative sequences and request rescheduling in the Python backend: a model with
// `sequence_batching { iterative_sequence: true }` takes requests without a correlation id (each
// a sequence of its own, START given) and may release a request with
// TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, which runs it again with the same inputs and the same
// client. Over gRPC streams and plain requests, from BLS, with cancellation and unload in the
// middle of the loop, and Triton's errors for the misuses.

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { InferParameter, ModelInferRequestSchema, ModelStreamInferResponse } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { postJson } from "./http-fixture.js";
import { copyPythonModels, pythonWithNumpy, shmLeftovers, stubProcesses } from "./python-harness.js";
import {
  cleanup,
  expectGrpcError,
  fp32Bytes,
  type InferenceClient,
  pushable,
  readBytesTensor,
  readFp32,
  readInt32,
  sequenceParameters,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

type Init = MessageInitShape<typeof ModelInferRequestSchema>;

const RESCHEDULE_UNSUPPORTED =
  "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.";

async function pythonServer(
  models: string[],
  setup: (repo: string) => void = () => undefined,
  options: Parameters<typeof startServer>[0] = {},
) {
  const repo = tempRepository();
  copyPythonModels(repo, models);
  setup(repo);
  const running = await startServer({ modelRepositories: [repo], pythonExecutable: python, ...options });
  expect(running.failedModels).toEqual([]);
  return { ...running, repo };
}

/** Rewrite a copied model's config.pbtxt. */
function editConfig(repo: string, model: string, edit: (text: string) => string): void {
  const file = join(repo, model, "config.pbtxt");
  writeFileSync(file, edit(readFileSync(file, "utf8")));
}

/** A request to denoise_steps; `batched` for its config with max_batch_size 4. */
function steps(
  n: number,
  options: { id?: string; delayMs?: number; parameters?: Record<string, InferParameter>; batched?: boolean } = {},
) {
  const shape = options.batched ? [1n, 1n] : [1n];
  return {
    modelName: "denoise_steps",
    id: options.id ?? "",
    parameters: options.parameters ?? {},
    inputs: [
      { name: "STEPS", datatype: "INT32", shape },
      ...(options.delayMs !== undefined ? [{ name: "DELAY", datatype: "UINT32", shape }] : []),
    ],
    rawInputContents: [
      new Uint8Array(Int32Array.of(n).buffer),
      ...(options.delayMs !== undefined ? [new Uint8Array(Uint32Array.of(options.delayMs).buffer)] : []),
    ],
  } satisfies Init;
}

function add(stepCount: number, parameters: Record<string, InferParameter> = {}, id = ""): Init {
  return {
    modelName: "iterative_add",
    id,
    parameters,
    inputs: [
      { name: "INPUT0", datatype: "FP32", shape: [4n] },
      { name: "STEPS", datatype: "INT32", shape: [1n] },
    ],
    rawInputContents: [fp32Bytes([1, 2, 3, 4]), new Uint8Array(Int32Array.of(stepCount).buffer)],
  };
}

const text = (value: string): InferParameter => ({ parameterChoice: { case: "stringParam", value } }) as InferParameter;
const int = (value: number): InferParameter =>
  ({ parameterChoice: { case: "int64Param", value: BigInt(value) } }) as InferParameter;

function output(r: { outputs: { name: string }[]; rawOutputContents: Uint8Array[] } | undefined, name: string) {
  const at = r?.outputs.findIndex((o) => o.name === name) ?? -1;
  return r?.rawOutputContents[at];
}
const int32Of = (r: ModelStreamInferResponse, name: string) => readInt32(output(r.inferResponse, name))[0];
const int64Of = (bytes: Uint8Array | undefined) =>
  bytes ? Number(new BigInt64Array(bytes.slice().buffer)[0]) : Number.NaN;
const finalFlag = (r: ModelStreamInferResponse) =>
  r.inferResponse?.parameters.triton_final_response?.parameterChoice.value;

/** Send `requests` on one stream and collect every response until each request's final one. */
async function streamAll(client: InferenceClient, requests: Init[]): Promise<ModelStreamInferResponse[]> {
  const input = pushable<Init>();
  for (const r of requests) input.push(r);
  input.end();
  const responses: ModelStreamInferResponse[] = [];
  for await (const r of client.modelStreamInfer(input)) responses.push(r);
  return responses;
}

const ours = () => stubProcesses().filter((p) => p.ppid === process.pid);
const shmOf = (pid: number) => shmLeftovers().filter((n) => n.includes(`_${pid}_`));

describe("an iterative decoupled Python model over a gRPC stream", () => {
  it("gives a request without a correlation id one of its own and START, and runs it again each time the model reschedules it", async () => {
    const { client } = await pythonServer(["denoise_steps"]);
    const responses = await streamAll(client, [steps(3, { id: "a" }), steps(2, { id: "b" })]);
    expect(responses.map((r) => r.errorMessage).filter(Boolean)).toEqual([]);
    const of = (id: string) => responses.filter((r) => r.inferResponse?.id === id);
    const [a, b] = [of("a"), of("b")];
    // Every response of the request reaches its stream, in order, the last one final.
    expect(a.map((r) => int32Of(r, "REMAINING"))).toEqual([2, 1, 0]);
    expect(b.map((r) => int32Of(r, "REMAINING"))).toEqual([1, 0]);
    expect(a.map(finalFlag)).toEqual([false, false, true]);
    // Each execution saw the request's own input again.
    expect(a.map((r) => int32Of(r, "STEPS_SEEN"))).toEqual([3, 3, 3]);
    expect(b.map((r) => int32Of(r, "STEPS_SEEN"))).toEqual([2, 2]);
    // START on the first execution only (Triton's rescheduled request has no flags).
    expect(a.map((r) => int32Of(r, "FLAGS"))).toEqual([1, 0, 0]);
    // One correlation id per request, non-zero, the same in every execution.
    const ids = [a, b].map((rs) => new Set(rs.map((r) => int64Of(output(r.inferResponse, "CORRID")))));
    expect(ids.map((s) => s.size)).toEqual([1, 1]);
    const [idA, idB] = ids.map((s) => [...s][0]);
    expect(idA).toBeGreaterThan(0);
    expect(idB).toBeGreaterThan(0);
    expect(idA).not.toBe(idB);
  });

  it("takes a client's own correlation id (START needed); the sequence ends when the model releases the request", async () => {
    const { client } = await pythonServer(["denoise_steps"]);
    const first = await streamAll(client, [steps(2, { id: "own", parameters: sequenceParameters(42n, true, false) })]);
    expect(first.map((r) => r.errorMessage)).toEqual(["", ""]);
    expect(first.map((r) => int64Of(output(r.inferResponse, "CORRID")))).toEqual([42, 42]);
    expect(first.map((r) => int32Of(r, "FLAGS"))).toEqual([1, 0]);
    // Released without RESCHEDULE: sequence 42 has ended, so the next request must START again.
    const again = await streamAll(client, [steps(2, { parameters: sequenceParameters(42n, false, false) })]);
    expect(again.map((r) => r.errorMessage)).toEqual([
      "inference request for sequence 42 to model 'denoise_steps' must specify the START flag on the first request of the sequence",
    ]);
  });

  it("batches the steps of concurrent requests: a request sent mid-loop joins the next step's batch", async () => {
    const { client } = await pythonServer(["denoise_steps"], (repo) =>
      editConfig(repo, "denoise_steps", (t) => t.replace("max_batch_size: 0", "max_batch_size: 4")),
    );
    const input = pushable<Init>();
    input.push(steps(20, { id: "long", delayMs: 40, batched: true }));
    const seen: ModelStreamInferResponse[] = [];
    let finals = 0;
    for await (const r of client.modelStreamInfer(input)) {
      seen.push(r);
      // After the long one's first step, a short one arrives.
      if (seen.length === 1) input.push(steps(2, { id: "short", delayMs: 40, batched: true }));
      if (finalFlag(r)) finals++;
      if (finals === 2) input.end();
    }
    expect(seen.map((r) => r.errorMessage).filter(Boolean)).toEqual([]);
    const short = seen.filter((r) => r.inferResponse?.id === "short");
    expect(short.map((r) => int32Of(r, "REMAINING"))).toEqual([1, 0]);
    // Both of the short one's steps ran in a batch with a step of the long one.
    expect(short.map((r) => int32Of(r, "BATCH"))).toEqual([2, 2]);
    const long = seen.filter((r) => r.inferResponse?.id === "long");
    expect(long.map((r) => int32Of(r, "REMAINING"))).toEqual(Array.from({ length: 20 }, (_, i) => 19 - i));
    expect(long[0] && int32Of(long[0], "BATCH")).toBe(1);
  });
});

describe("an iterative non-decoupled Python model", () => {
  it("answers a plain gRPC request once, after the model rescheduled it STEPS-1 times", async () => {
    const { client, server } = await pythonServer(["iterative_add"]);
    const reply = await client.modelInfer(add(3));
    expect(readFp32(output(reply, "SUM"))).toEqual([3, 6, 9, 12]);
    expect(readInt32(output(reply, "EXECUTIONS"))).toEqual([3]);
    expect(readInt32(output(reply, "FLAGS"))).toEqual([1, 0, 0]);
    expect(int64Of(output(reply, "CORRID"))).toBeGreaterThan(0);
    const stats = server.core.models.resolve("iterative_add", "").stats;
    // Three executions, one request, answered once.
    expect(stats.executionCount).toBe(3);
    expect(stats.success.count).toBe(1);
    expect(stats.pending).toBe(0);
  });

  it("answers over HTTP, and runs concurrent requests to completion", async () => {
    const { client, httpUrl } = await pythonServer(["iterative_add"], undefined, { http: true });
    const port = Number(new URL(httpUrl as string).port);
    const reply = await postJson(port, "/v2/models/iterative_add/infer", {
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4], data: [1, 1, 1, 1] },
        { name: "STEPS", datatype: "INT32", shape: [1], data: [4] },
      ],
      outputs: [{ name: "SUM" }, { name: "EXECUTIONS" }],
    });
    expect(reply.status).toBe(200);
    const body = reply.json() as { outputs: { name: string; data: number[] }[] };
    expect(body.outputs.map((o) => [o.name, o.data])).toEqual([
      ["SUM", [4, 4, 4, 4]],
      ["EXECUTIONS", [4]],
    ]);
    const replies = await Promise.all([1, 2, 3, 4, 5].map((n) => client.modelInfer(add(n))));
    expect(replies.map((r) => readInt32(output(r, "EXECUTIONS"))[0])).toEqual([1, 2, 3, 4, 5]);
    expect(replies.map((r) => readFp32(output(r, "SUM"))[0])).toEqual([1, 2, 3, 4, 5]);
  });
});

describe("misuses, with Triton's errors", () => {
  it("a response returned for a rescheduled request fails the batch with Triton's text; the instance goes on", async () => {
    const { client } = await pythonServer(["iterative_add"]);
    await expectGrpcError(
      client.modelInfer(add(2, { misuse: text("return_response") })),
      Code.Internal,
      /^Failed to process the request\(s\) for model instance 'iterative_add_0_0', message: TritonModelException: Expected a None object in the execute function return list for reschduled request, found type '<class 'triton_python_backend_utils\.InferenceResponse'>'\./,
    );
    expect(readInt32(output(await client.modelInfer(add(2)), "EXECUTIONS"))).toEqual([2]);
  });

  it("a request whose final response was sent is not rescheduled: it has ended", async () => {
    const { client, server } = await pythonServer(["iterative_add"]);
    const reply = await client.modelInfer(add(5, { misuse: text("send_final") }));
    expect(readInt32(output(reply, "EXECUTIONS"))).toEqual([1]);
    expect(server.core.models.resolve("iterative_add", "").stats.executionCount).toBe(1);
  });

  it("set_release_flags refuses flags Triton does not define, and calls after execute returned", async () => {
    const { client } = await pythonServer(["iterative_add"]);
    await expectGrpcError(
      client.modelInfer(add(2, { misuse: text("bad_flags") })),
      Code.Internal,
      /message: TritonModelException: release flags must be TRITONSERVER_REQUEST_RELEASE_ALL or TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, got 3/,
    );
    await expectGrpcError(
      client.modelInfer(add(2, { misuse: text("late_flags") })),
      Code.Internal,
      "Unable to set the release flags: the request was released when the execute function that got it returned",
    );
  });

  it("a model without iterative_sequence cannot reschedule: the request fails with Triton's text (default and decoupled)", async () => {
    const { client } = await pythonServer(["iterative_add", "denoise_steps"], (repo) => {
      const plain = (t: string) => t.replace(/sequence_batching \{[^}]*\}/, "");
      editConfig(repo, "iterative_add", plain);
      editConfig(repo, "denoise_steps", (t) =>
        t.replace("iterative_sequence: true", "max_sequence_idle_microseconds: 5000000"),
      );
    });
    // A request that needs no rescheduling is answered as usual.
    expect(readInt32(output(await client.modelInfer(add(1)), "EXECUTIONS"))).toEqual([1]);
    await expectGrpcError(client.modelInfer(add(2)), Code.InvalidArgument, RESCHEDULE_UNSUPPORTED);
    // Sequence batching without iterative_sequence: the first response, then the error.
    const responses = await streamAll(client, [steps(3, { parameters: sequenceParameters(7n, true, false) })]);
    expect(responses.map((r) => r.errorMessage)).toEqual(["", RESCHEDULE_UNSUPPORTED]);
    expect(responses[0] && int32Of(responses[0], "REMAINING")).toBe(2);
  });
});

describe("BLS into rescheduling models", () => {
  it("streams every response of a decoupled iterative model and gets a non-decoupled one's single answer", async () => {
    const { client } = await pythonServer(["bls_iterative", "denoise_steps", "iterative_add"]);
    const reply = await client.modelInfer({
      modelName: "bls_iterative",
      inputs: [{ name: "STEPS", datatype: "INT32", shape: [1n] }],
      rawInputContents: [new Uint8Array(Int32Array.of(4).buffer)],
    });
    expect(readInt32(output(reply, "REMAINING"))).toEqual([3, 2, 1, 0]);
    expect(readFp32(output(reply, "SUM"))).toEqual([4, 8, 12, 16]);
    expect(readBytesTensor(output(reply, "ERROR"))[0]).toContain(
      "Expected a None object in the execute function return list for reschduled request",
    );
  });
});

describe("cancellation and unload while a request is rescheduled", () => {
  it("a cancelled stream stops the loop and frees the sequence's slot", async () => {
    const { client, server } = await pythonServer(["denoise_steps"]);
    const stats = server.core.models.resolve("denoise_steps", "").stats;
    const abort = new AbortController();
    const input = pushable<Init>();
    input.push(steps(100_000, { delayMs: 10 }));
    let received = 0;
    await expect(
      (async () => {
        for await (const _ of client.modelStreamInfer(input, { signal: abort.signal })) {
          if (++received === 3) abort.abort();
        }
      })(),
    ).rejects.toThrow();
    // One instance, max_batch_size 0: a single slot, which the next request gets only once the
    // cancelled one has stopped coming back.
    const next = await streamAll(client, [steps(2)]);
    expect(next.map((r) => int32Of(r, "REMAINING"))).toEqual([1, 0]);
    expect(next.map((r) => int32Of(r, "FLAGS"))).toEqual([1, 0]);
    expect(stats.executionCount).toBeLessThan(100);
    expect(stats.pending).toBe(0);
  });

  it("a cancelled plain request is answered CANCELLED and frees its slot", async () => {
    const { client, server } = await pythonServer(["iterative_add"]);
    const stats = server.core.models.resolve("iterative_add", "").stats;
    const abort = new AbortController();
    const call = client.modelInfer(add(100_000, { delay_ms: int(10) }), { signal: abort.signal });
    await waitFor(() => stats.executionCount >= 3, { what: "a few executions" });
    abort.abort();
    await expect(call).rejects.toThrow();
    await waitFor(() => stats.pending === 0 && stats.fail.count === 1, { what: "the request to be cancelled" });
    expect(stats.failures.CANCELED).toBe(1);
    const executions = stats.executionCount;
    expect(readInt32(output(await client.modelInfer(add(2)), "EXECUTIONS"))).toEqual([2]);
    expect(stats.executionCount).toBe(executions + 2);
  });

  it("an unload lets a rescheduled request finish its loop, then stops the stub and leaves no shared memory", async () => {
    const { client } = await pythonServer(["denoise_steps"], undefined, {
      controlMode: "explicit",
      loadModels: ["denoise_steps"],
    });
    const stubs = ours();
    expect(stubs).toHaveLength(1);
    const input = pushable<Init>();
    input.push(steps(10, { delayMs: 30 }));
    const responses: ModelStreamInferResponse[] = [];
    let unloaded: Promise<unknown> | undefined;
    for await (const r of client.modelStreamInfer(input)) {
      responses.push(r);
      if (responses.length === 2) unloaded = client.repositoryModelUnload({ modelName: "denoise_steps" });
      if (finalFlag(r) || r.errorMessage) input.end();
    }
    await unloaded;
    expect(responses.map((r) => r.errorMessage).filter(Boolean)).toEqual([]);
    expect(responses.map((r) => int32Of(r, "REMAINING"))).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    await waitFor(() => !existsSync(`/proc/${stubs[0]?.pid}`), { what: "the stub to end" });
    expect(shmOf(process.pid)).toEqual([]);
  });

  it("an unload past --exit-timeout-secs fails a request that keeps rescheduling, and does not hang", async () => {
    const { client, server } = await pythonServer(["iterative_add"], undefined, {
      controlMode: "explicit",
      loadModels: ["iterative_add"],
      exitTimeoutSecs: 1,
    });
    const stubs = ours();
    const stats = server.core.models.resolve("iterative_add", "").stats;
    const call = client.modelInfer(add(1_000_000, { delay_ms: int(5) }));
    const failed = expect(call).rejects.toThrow(/was unloaded/);
    await waitFor(() => stats.executionCount >= 3, { what: "the loop to run" });
    const start = performance.now();
    await client.repositoryModelUnload({ modelName: "iterative_add" });
    expect((performance.now() - start) / 1000).toBeLessThan(6);
    await failed;
    await waitFor(() => !existsSync(`/proc/${stubs[0]?.pid}`), { what: "the stub to end" });
    expect(shmOf(process.pid)).toEqual([]);
    // Loaded again, it works.
    await client.repositoryModelLoad({ modelName: "iterative_add" });
    expect(readInt32(output(await client.modelInfer(add(3)), "EXECUTIONS"))).toEqual([3]);
  });
});
