// The lean ModelInfer path (src/frontend/grpc/lean-calls.ts) driven by a client on node:http2
// alone: compression, framing errors, deadlines, cancellation and large raw outputs, checked
// against the gRPC-over-HTTP/2 spec rather than against another library's client.
import { appendFileSync } from "node:fs";
import { connect } from "node:http2";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ModelInferRequestSchema, ModelInferResponseSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { frame, type GrpcReply, rawGrpc } from "./grpc-wire.js";
import {
  bytesTensor,
  cleanup,
  copyModel,
  range,
  readBytesTensor,
  readInt32,
  simpleRequest,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

afterEach(cleanup);

const A = range(16);
const B = range(16).map((i) => 3 * i);

type Reply = GrpcReply;

/** One raw ModelInfer call: `body` is sent as it is (callers build the frames). */
function call(
  port: number,
  body: Buffer,
  headers: Record<string, string> = {},
  cancelAfterMs?: number,
): Promise<Reply> {
  return rawGrpc(`http://127.0.0.1:${port}`, "/inference.GRPCInferenceService/ModelInfer", [body], {
    headers,
    ...(cancelAfterMs !== undefined ? { cancelAfterMs } : {}),
  });
}

function simple(id = "", model = "simple"): Uint8Array {
  return toBinary(
    ModelInferRequestSchema,
    create(ModelInferRequestSchema, { ...simpleRequest(A, B, { id }), modelName: model }),
  );
}

function outputs(reply: Reply): Record<string, Uint8Array> {
  expect(reply.status).toBe(0);
  expect(reply.messages).toHaveLength(1);
  const response = fromBinary(ModelInferResponseSchema, reply.messages[0] as Buffer);
  return Object.fromEntries(response.outputs.map((o, i) => [o.name, response.rawOutputContents[i] as Uint8Array]));
}

function outputsMessage(reply: Reply): Buffer {
  expect(reply.status).toBe(0);
  return reply.messages[0] as Buffer;
}

/** A copy of `simple` whose dynamic batcher holds a lone request for `delayUs`. */
function slowSimple(delayUs: number): string {
  const repo = tempRepository();
  const folder = copyModel("simple", repo);
  appendFileSync(join(folder, "config.pbtxt"), `\ndynamic_batching { max_queue_delay_microseconds: ${delayUs} }\n`);
  return repo;
}

describe("ModelInfer on the lean gRPC path", () => {
  it("answers a plain request with headers, one message and grpc-status 0 in the trailers", async () => {
    const { grpcPort } = await startServer();
    const reply = await call(grpcPort, frame(simple("r1")));
    expect(reply.headers[":status"]).toBe(200);
    expect(reply.headers["content-type"]).toBe("application/grpc");
    // As Triton's gRPC server: no `date` header (Node would add one).
    expect(reply.headers.date).toBeUndefined();
    const out = outputs(reply);
    expect(readInt32(out.OUTPUT0)).toEqual(A.map((a, i) => a + (B[i] as number)));
    expect(readInt32(out.OUTPUT1)).toEqual(A.map((a, i) => a - (B[i] as number)));
    expect(fromBinary(ModelInferResponseSchema, reply.messages[0] as Buffer).id).toBe("r1");
  });

  it("reads a gzip-compressed request (grpc-encoding: gzip)", async () => {
    const { grpcPort } = await startServer();
    const reply = await call(grpcPort, frame(gzipSync(simple()), true), { "grpc-encoding": "gzip" });
    expect(readInt32(outputs(reply).OUTPUT0)).toEqual(A.map((a, i) => a + (B[i] as number)));
  });

  it("rejects a compressed message in an encoding it does not know with UNIMPLEMENTED", async () => {
    const { grpcPort } = await startServer();
    const reply = await call(grpcPort, frame(simple(), true), { "grpc-encoding": "snappy" });
    expect(reply.status).toBe(12);
    expect(reply.message).toBe("Compression algorithm snappy is not supported");
  });

  it("rejects a body that is not exactly one message with INTERNAL", async () => {
    const { grpcPort } = await startServer();
    const one = frame(simple());
    expect((await call(grpcPort, Buffer.concat([one, one]))).status).toBe(13);
    expect((await call(grpcPort, one.subarray(0, one.length - 3))).message).toBe("protocol error: incomplete message");
    expect((await call(grpcPort, Buffer.alloc(0))).message).toBe("protocol error: missing message");
    // The server is still there for the next call.
    expect(outputs(await call(grpcPort, one)).OUTPUT0).toBeDefined();
  });

  it("answers Triton's error texts in trailers-only responses, percent-encoded as the spec says", async () => {
    const { grpcPort } = await startServer();
    const reply = await call(grpcPort, frame(simple("", "no_such_model")));
    expect(reply.status).toBe(5);
    expect(reply.messages).toHaveLength(0);
    expect(reply.message).toBe("Request for unknown model: 'no_such_model' is not found");
    expect(reply.headers["grpc-message"]).toBe(reply.message);
  });

  it("returns 1 MiB raw outputs intact (multi-byte length prefixes, many DATA frames)", async () => {
    const { grpcPort } = await startServer();
    const big = "x".repeat(1 << 20);
    const words = [big, "short", `${big}y`];
    const request = toBinary(ModelInferRequestSchema, {
      ...fromBinary(ModelInferRequestSchema, simple()),
      modelName: "simple_identity",
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
    const reply = await call(grpcPort, frame(request));
    expect(readBytesTensor(outputs(reply).OUTPUT0)).toEqual(words);
  });

  it("fails a request past its grpc-timeout with DEADLINE_EXCEEDED and takes it out of the queue", async () => {
    const { grpcPort, client } = await startServer({ modelRepositories: [slowSimple(1_000_000)] });
    const reply = await call(grpcPort, frame(simple()), { "grpc-timeout": "150m" });
    expect(reply.status).toBe(4);
    expect(reply.message).toBe("Deadline Exceeded");
    // A later request runs once the batcher's delay has passed; it runs alone: the expired one is gone.
    expect((await call(grpcPort, frame(simple("later")))).status).toBe(0);
    const stats = (await client.modelStatistics({ name: "simple" })).modelStats[0];
    expect([stats?.executionCount, stats?.inferenceCount]).toEqual([1n, 1n]);
  });

  it("never executes a request the client cancelled while it was queued", async () => {
    const { grpcPort, client } = await startServer({ modelRepositories: [slowSimple(600_000)] });
    await call(grpcPort, frame(simple()), {}, 100);
    const stats = await waitFor(
      async () => {
        const s = (await client.modelStatistics({ name: "simple" })).modelStats[0];
        return s && s.inferenceStats?.fail?.count === 1n ? s : undefined;
      },
      { timeoutMs: 3000 },
    );
    expect(stats.executionCount).toBe(0n);
    // A later request runs once the batcher's delay has passed; it runs alone: the cancelled one is gone.
    expect((await call(grpcPort, frame(simple("later")))).status).toBe(0);
    const after = (await client.modelStatistics({ name: "simple" })).modelStats[0];
    expect([after?.executionCount, after?.inferenceCount]).toEqual([1n, 1n]);
  });

  it("survives a client that resets its call with an error code, and answers the call beside it", async () => {
    // Node emits a reset other than CANCEL as an 'error' on the server's stream: unhandled, it would end the process.
    const { grpcPort, client } = await startServer({ modelRepositories: [slowSimple(300_000)] });
    const origin = `http://127.0.0.1:${grpcPort}`;
    const path = "/inference.GRPCInferenceService/ModelInfer";
    const [reset, neighbour] = await Promise.all([
      rawGrpc(origin, path, [frame(simple("reset"))], { cancelAfterMs: 50, resetCode: 0x2 }),
      rawGrpc(origin, path, [frame(simple("neighbour"))]),
    ]);
    expect(reset.status).toBe(-1);
    expect(fromBinary(ModelInferResponseSchema, outputsMessage(neighbour)).id).toBe("neighbour");
    expect((await call(grpcPort, frame(simple("after")))).status).toBe(0);
    expect((await client.serverLive({})).live).toBe(true);
  });

  it("leaves gRPC-Web and Connect requests to connect-node", async () => {
    const { grpcUrl } = await startServer();
    const session = connect(grpcUrl);
    try {
      const reply = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": "/inference.GRPCInferenceService/ModelInfer",
          "content-type": "application/json",
        });
        stream.end(JSON.stringify({ modelName: "no_such_model" }));
        let status = 0;
        let body = "";
        stream.on("response", (h) => {
          status = Number(h[":status"]);
        });
        stream.setEncoding("utf8");
        stream.on("data", (chunk: string) => {
          body += chunk;
        });
        stream.on("end", () => resolve({ status, body }));
        stream.on("error", reject);
      });
      expect(reply.status).toBe(404);
      expect(JSON.parse(reply.body)).toEqual({
        code: "not_found",
        message: "Request for unknown model: 'no_such_model' is not found",
      });
    } finally {
      session.close();
    }
  });
});
