// Decoupled models over gRPC ModelStreamInfer (PROTOCOL.md §9.1) and cancellation end to end:
// response order and final flags, flag-only finals, errors on the stream, a cancelled stream
// reaching the model and its BLS children, and a request cancelled while queued never executing.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { ModelInferRequest, ModelInferRequestSchema, ModelStreamInferResponse } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import {
  cleanup,
  expectGrpcError,
  type InferenceClient,
  pushable,
  readInt32,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

type Init = MessageInitShape<typeof ModelInferRequestSchema>;

const int32 = (values: number[]) => new Uint8Array(Int32Array.from(values).buffer);
const uint32 = (values: number[]) => new Uint8Array(Uint32Array.from(values).buffer);

function repeat(values: number[], delays: number[], wait = 0, id = ""): Init {
  return {
    modelName: "repeat_int32",
    id,
    inputs: [
      { name: "IN", datatype: "INT32", shape: [BigInt(values.length)] },
      { name: "DELAY", datatype: "UINT32", shape: [BigInt(delays.length)] },
      { name: "WAIT", datatype: "UINT32", shape: [1n] },
    ] as ModelInferRequest["inputs"],
    rawInputContents: [int32(values), uint32(delays), uint32([wait])],
  };
}

function square(n: number, id = "", emptyFinal = false): Init {
  return {
    modelName: "square_int32",
    id,
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }] as ModelInferRequest["inputs"],
    rawInputContents: [int32([n])],
    ...(emptyFinal
      ? { parameters: { triton_enable_empty_final_response: { parameterChoice: { case: "boolParam", value: true } } } }
      : {}),
  } as Init;
}

const finalFlag = (r: ModelStreamInferResponse) => {
  const choice = r.inferResponse?.parameters.triton_final_response?.parameterChoice;
  return choice?.case === "boolParam" ? choice.value : undefined;
};
const out = (r: ModelStreamInferResponse, name: string) => {
  const at = r.inferResponse?.outputs.findIndex((o) => o.name === name) ?? -1;
  return readInt32(r.inferResponse?.rawOutputContents[at]);
};

/** Send `requests` on one stream, end it, and collect every response. */
async function streamAll(client: InferenceClient, requests: Init[], headers?: Record<string, string>) {
  const input = pushable<Init>();
  for (const r of requests) input.push(r);
  input.end();
  const responses: ModelStreamInferResponse[] = [];
  for await (const r of client.modelStreamInfer(input, headers ? { headers } : {})) responses.push(r);
  return responses;
}

describe("decoupled models on ModelStreamInfer", () => {
  it("repeat_int32 streams one response per element in order, each marked not final, and no flag-only final by default", async () => {
    const { client } = await startServer();
    const responses = await streamAll(client, [repeat([4, 2, 0, 1], [1, 2, 3, 4], 0, "r")]);
    expect(responses.map((r) => r.errorMessage)).toEqual(["", "", "", ""]);
    expect(responses.map((r) => out(r, "OUT")[0])).toEqual([4, 2, 0, 1]);
    expect(responses.map((r) => out(r, "IDX")[0])).toEqual([0, 1, 2, 3]);
    expect(responses.map(finalFlag)).toEqual([false, false, false, false]);
    expect(responses.map((r) => r.inferResponse?.id)).toEqual(["r", "r", "r", "r"]);
  });

  it("sends the empty final response to a request that asks for it", async () => {
    const { client } = await startServer();
    const responses = await streamAll(client, [square(2, "s", true)]);
    expect(responses.map(finalFlag)).toEqual([false, false, true]);
    const last = responses[2]?.inferResponse;
    expect(last?.outputs).toEqual([]);
    expect([last?.id, last?.modelName, last?.modelVersion]).toEqual(["s", "square_int32", "1"]);
    // n = 0: nothing at all without the parameter, the final flag alone with it.
    expect(await streamAll(client, [square(0)])).toEqual([]);
    expect((await streamAll(client, [square(0, "z", true)])).map(finalFlag)).toEqual([true]);
  });

  it("interleaves decoupled responses as produced and keeps default-mode responses in request order", async () => {
    const { client } = await startServer();
    const add = {
      modelName: "add_sub",
      id: "add",
      inputs: ["INPUT0", "INPUT1"].map((name) => ({
        name,
        datatype: "FP32",
        shape: [4n],
      })) as ModelInferRequest["inputs"],
      rawInputContents: [new Uint8Array(16), new Uint8Array(16)],
    };
    const responses = await streamAll(client, [repeat([7, 8], [200, 10], 0, "slow"), add, square(1, "sq")]);
    // The default-mode answer does not wait for the slow stream; the slow stream's last response comes last.
    const ids = responses.map((r) => r.inferResponse?.id);
    expect(ids.slice(0, 2).sort()).toEqual(["add", "sq"]);
    expect(ids.slice(2)).toEqual(["slow", "slow"]);
    expect(finalFlag(responses.find((r) => r.inferResponse?.id === "add") as ModelStreamInferResponse)).toBe(true);
  });

  it("answers a model's error on the stream and goes on; with triton_grpc_error the first error ends the stream", async () => {
    const { client } = await startServer();
    const responses = await streamAll(client, [square(-1, "bad"), square(1, "good")]);
    const bad = responses.find((r) => r.inferResponse?.id === "bad");
    expect(bad?.errorMessage).toBe("IN must be >= 0, got -1");
    expect(finalFlag(bad as ModelStreamInferResponse)).toBe(true);
    expect(responses.filter((r) => r.inferResponse?.id === "good").map((r) => r.errorMessage)).toEqual([""]);

    const failure = await streamAll(client, [square(-1, "bad")], { triton_grpc_error: "true" }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(ConnectError);
    expect((failure as ConnectError).code).toBe(3);
    expect((failure as ConnectError).rawMessage).toBe("IN must be >= 0, got -1");
  });

  it("refuses decoupled models on unary ModelInfer with Triton's message", async () => {
    const { client } = await startServer();
    await expectGrpcError(
      client.modelInfer(square(1)),
      12,
      "ModelInfer RPC doesn't support models with decoupled transaction policy",
    );
  });

  it("streams from a decoupled model inside a decoupled model (bls_decoupled over square_int32)", async () => {
    const { client } = await startServer();
    const request = { ...square(3, "b"), modelName: "bls_decoupled" };
    const responses = await streamAll(client, [request]);
    expect(responses.map((r) => out(r, "OUT")[0])).toEqual([30, 31, 32]);
  });
});

/** A repository with a model that ticks until cancelled and one that relays it through BLS. */
function cancellationRepository(): { repo: string; marker: string; log: string } {
  const repo = tempRepository();
  const marker = join(repo, "ticker-cancelled.txt");
  const log = join(repo, "executed.txt");
  const io = `input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`;
  const write = (name: string, config: string, source: string) => {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"\nbackend: "js"\nmax_batch_size: 0\n${config}\n${io}\n`,
    );
    writeFileSync(join(repo, name, "1", "model.mjs"), source);
  };
  write(
    "ticker",
    "model_transaction_policy { decoupled: true }",
    `import { writeFileSync } from "node:fs";
     export default class {
       execute(requests) {
         for (const request of requests) {
           const sender = request.responseSender();
           let n = 0;
           const timer = setInterval(() => sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(n++) }] }), 20);
           request.signal.addEventListener("abort", () => {
             clearInterval(timer);
             writeFileSync(${JSON.stringify(marker)}, String(n));
             sender.send(undefined, { final: true });
           });
         }
       }
     }`,
  );
  write(
    "relay",
    "model_transaction_policy { decoupled: true }",
    `export default class {
       execute(requests, ctx) {
         for (const request of requests) {
           const sender = request.responseSender();
           (async () => {
             try {
               for await (const r of ctx.stream({ model: "ticker", inputs: [request.input("IN")] })) sender.send({ outputs: [{ ...r.output("OUT") }] });
               sender.send(undefined, { final: true });
             } catch (error) { sender.send({ error }, { final: true }); }
           })();
         }
       }
     }`,
  );
  write(
    "busy",
    "",
    `import { appendFileSync } from "node:fs";
     export default class {
       async execute(requests) {
         for (const r of requests) appendFileSync(${JSON.stringify(log)}, r.id + "\\n");
         await new Promise((resolve) => setTimeout(resolve, 400));
         return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").typed() }] }));
       }
     }`,
  );
  return { repo, marker, log };
}

describe("cancellation", () => {
  it("a cancelled stream reaches the model (request.signal) and, through BLS, the model it streams from", async () => {
    const { repo, marker } = cancellationRepository();
    const { client } = await startServer({ modelRepositories: [repo] });
    const abort = new AbortController();
    const input = pushable<Init>();
    input.push({ ...square(1), modelName: "relay" });
    const received: number[] = [];
    const reading = (async () => {
      for await (const r of client.modelStreamInfer(input, { signal: abort.signal })) {
        received.push(out(r, "OUT")[0] as number);
        if (received.length === 3) abort.abort();
      }
    })().catch((error: unknown) => error);
    expect(await reading).toBeInstanceOf(ConnectError);
    expect(received).toEqual([0, 1, 2]);
    // The ticker, two models away from the client, saw the cancellation and stopped.
    const ticks = Number(
      await waitFor(() => (existsSync(marker) ? readFileSync(marker, "utf8") : undefined), { timeoutMs: 5000 }),
    );
    expect(ticks).toBeGreaterThanOrEqual(3);
    expect(ticks).toBeLessThan(50);
  });

  it("a request cancelled while it waits for the instance never executes", async () => {
    const { repo, log } = cancellationRepository();
    const { client } = await startServer({ modelRepositories: [repo] });
    const busy = (id: string) => ({ ...square(1, id), modelName: "busy" });
    const first = client.modelInfer(busy("first"));
    await waitFor(() => existsSync(log));
    const abort = new AbortController();
    const second = client.modelInfer(busy("second"), { signal: abort.signal });
    abort.abort();
    await expect(second).rejects.toBeInstanceOf(ConnectError);
    expect(readInt32((await first).rawOutputContents[0])).toEqual([1]);
    const third = await client.modelInfer(busy("third"));
    expect(third.id).toBe("third");
    expect(readFileSync(log, "utf8").split("\n").filter(Boolean)).toEqual(["first", "third"]);
  });
});
