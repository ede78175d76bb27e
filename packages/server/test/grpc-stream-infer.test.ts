// The lean ModelStreamInfer path (src/frontend/grpc/lean-calls.ts) driven by a client on
// node:http2 alone: messages split across and packed into DATA frames, compression, large raw
// outputs, per-request errors and triton_grpc_error, deadlines and restricted protocols.
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema, ModelStreamInferResponseSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { frame, rawGrpc } from "./grpc-wire.js";
import {
  bytesTensor,
  cleanup,
  range,
  readBytesTensor,
  readInt32,
  simpleRequest,
  startServer,
} from "./support/harness.js";

afterEach(cleanup);

const A = range(16);
const B = range(16).map((i) => 3 * i);

interface Reply {
  status: number;
  message: string;
  headers: Record<string, unknown>;
  responses: ReturnType<typeof decode>[];
}

const decode = (bytes: Buffer) => fromBinary(ModelStreamInferResponseSchema, bytes);

/** One raw ModelStreamInfer call: each of `writes` goes out as its own write, then the stream ends (unless `keepOpen`). */
async function stream(
  port: number,
  writes: Buffer[],
  headers: Record<string, string> = {},
  keepOpen = false,
): Promise<Reply> {
  const reply = await rawGrpc(`http://127.0.0.1:${port}`, "/inference.GRPCInferenceService/ModelStreamInfer", writes, {
    headers,
    keepOpen,
  });
  return { ...reply, responses: reply.messages.map(decode) };
}

function simple(id: string, model = "simple"): Uint8Array {
  return toBinary(
    ModelInferRequestSchema,
    create(ModelInferRequestSchema, { ...simpleRequest(A, B, { id }), modelName: model }),
  );
}

const sum = A.map((a, i) => a + (B[i] as number));
const out0 = (r: Reply["responses"][number]) => {
  const at = r.inferResponse?.outputs.findIndex((o) => o.name === "OUTPUT0") ?? -1;
  return readInt32(r.inferResponse?.rawOutputContents[at]);
};

describe("ModelStreamInfer on the lean gRPC path", () => {
  it("reads messages split across writes and packed into one, and answers each in order", async () => {
    const { grpcPort } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    const one = frame(simple("r1"));
    const two = Buffer.concat([frame(simple("r2")), frame(simple("r3"))]);
    const reply = await stream(grpcPort, [one.subarray(0, 3), one.subarray(3, 40), one.subarray(40), two]);
    expect(reply.status).toBe(0);
    expect(reply.headers["content-type"]).toBe("application/grpc");
    expect(reply.headers.date).toBeUndefined();
    expect(reply.responses.map((r) => r.inferResponse?.id)).toEqual(["r1", "r2", "r3"]);
    for (const r of reply.responses) {
      expect(out0(r)).toEqual(sum);
      expect(r.inferResponse?.parameters.triton_final_response?.parameterChoice.value).toBe(true);
    }
  });

  it("reads gzip-compressed messages", async () => {
    const { grpcPort } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    const reply = await stream(grpcPort, [frame(gzipSync(simple("z1")), true), frame(gzipSync(simple("z2")), true)], {
      "grpc-encoding": "gzip",
    });
    expect(reply.responses.map((r) => [r.inferResponse?.id, out0(r)])).toEqual([
      ["z1", sum],
      ["z2", sum],
    ]);
  });

  it("returns 1 MiB raw outputs intact", async () => {
    const { grpcPort } = await startServer({ controlMode: "explicit", loadModels: ["simple_identity"] });
    const big = "x".repeat(1 << 20);
    const words = [big, "short", `${big}y`];
    const request = toBinary(ModelInferRequestSchema, {
      ...fromBinary(ModelInferRequestSchema, simple("big", "simple_identity")),
      inputs: [
        {
          $typeName: "inference.ModelInferRequest.InferInputTensor",
          name: "INPUT0",
          datatype: "BYTES",
          shape: [1n, 3n],
          parameters: {},
        },
      ],
      rawInputContents: [bytesTensor(words)],
    });
    const reply = await stream(grpcPort, [frame(request), frame(request)]);
    expect(reply.responses).toHaveLength(2);
    for (const r of reply.responses) expect(readBytesTensor(r.inferResponse?.rawOutputContents[0])).toEqual(words);
  });

  it("answers a failed request with its error message and goes on; with triton_grpc_error the error ends the stream", async () => {
    const { grpcPort } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    const writes = [frame(simple("bad", "no_such_model")), frame(simple("good"))];
    const reply = await stream(grpcPort, writes);
    expect(reply.status).toBe(0);
    expect(reply.responses.map((r) => [r.errorMessage, r.inferResponse?.id])).toEqual([
      ["Request for unknown model: 'no_such_model' is not found", "bad"],
      ["", "good"],
    ]);
    const closing = await stream(grpcPort, writes, { triton_grpc_error: "true" });
    expect([closing.status, closing.message]).toEqual([5, "Request for unknown model: 'no_such_model' is not found"]);
  });

  it("ends an incomplete message with INTERNAL, a late stream with DEADLINE_EXCEEDED, a restricted one with UNAVAILABLE", async () => {
    const { grpcPort } = await startServer({
      controlMode: "explicit",
      loadModels: ["simple"],
      grpc: { restricted: [{ protocols: ["inference"], key: "k", value: "v" }] },
    });
    const allowed = { "triton-grpc-protocol-k": "v" };
    const one = frame(simple("r1"));
    const cut = await stream(grpcPort, [one, one.subarray(0, 20)], allowed);
    expect([cut.status, cut.message]).toEqual([13, "protocol error: incomplete message"]);
    // The client keeps the stream open past its deadline: answered, then DEADLINE_EXCEEDED.
    const late = await stream(grpcPort, [one], { ...allowed, "grpc-timeout": "100m" }, true);
    expect([late.status, late.message, late.responses.length]).toEqual([4, "Deadline Exceeded", 1]);
    const refused = await stream(grpcPort, [one]);
    expect([refused.status, refused.message]).toEqual([
      14,
      "This protocol is restricted, expecting header 'triton-grpc-protocol-k'",
    ]);
  });

  it("survives a client that resets its stream with an error code, and serves the stream beside it", async () => {
    // Node emits a reset other than CANCEL as an 'error' on the server's stream: unhandled, it would end the process.
    const { grpcPort, client } = await startServer();
    const path = "/inference.GRPCInferenceService/ModelStreamInfer";
    const origin = `http://127.0.0.1:${grpcPort}`;
    const one = frame(simple("r1"));
    const [reset, beside] = await Promise.all([
      rawGrpc(origin, path, [one], { keepOpen: true, cancelAfterMs: 50, resetCode: 0x2 }),
      stream(grpcPort, [one, frame(simple("r2"))]),
    ]);
    expect(reset.status).toBe(-1);
    expect([beside.status, beside.responses.map((r) => r.inferResponse?.id)]).toEqual([0, ["r1", "r2"]]);
    expect((await stream(grpcPort, [one])).status).toBe(0);
    expect((await client.serverLive({})).live).toBe(true);
  });
});
