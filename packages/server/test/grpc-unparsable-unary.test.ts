// A unary RPC served by connect-node whose request message is not valid protobuf: over gRPC,
// gRPC-Web and the Connect protocol it is INVALID_ARGUMENT naming the request message, as on the
// lean ModelInfer path, never INTERNAL with connect's "parse binary: " and the decoder's text.
import { connect } from "node:http2";
import { afterEach, describe, expect, it } from "vitest";
import { grpcCall } from "./grpc-wire.js";
import { cleanup, startServer } from "./support/harness.js";

afterEach(cleanup);

/** Field 1, length-delimited, announcing 100 bytes that never come. */
const CUT_SHORT = Uint8Array.from([0x0a, 0x64, 0x01]);
const SERVICE = "/inference.GRPCInferenceService";

interface RawReply {
  httpStatus: number;
  headers: Record<string, unknown>;
  trailers: Record<string, unknown>;
  body: Buffer;
}

/** One HTTP/2 POST with the given content type and body, answered as it came. */
function post(origin: string, path: string, contentType: string, body: Uint8Array): Promise<RawReply> {
  const session = connect(origin);
  return new Promise<RawReply>((resolve, reject) => {
    session.once("error", reject);
    const stream = session.request({ ":method": "POST", ":path": path, "content-type": contentType });
    stream.end(body);
    const reply: RawReply = { httpStatus: 0, headers: {}, trailers: {}, body: Buffer.alloc(0) };
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      reply.headers = h;
      reply.httpStatus = Number(h[":status"]);
    });
    stream.on("trailers", (t) => {
      reply.trailers = t;
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", reject);
    stream.on("end", () => {
      reply.body = Buffer.concat(chunks);
      resolve(reply);
    });
  }).finally(() => session.close());
}

function frame(message: Uint8Array): Uint8Array {
  const out = Buffer.alloc(5 + message.byteLength);
  out.writeUInt32BE(message.byteLength, 1);
  out.set(message, 5);
  return out;
}

/** The status and message of a gRPC-Web body's trailer frame. */
function grpcWebStatus(body: Buffer): { status: number; message: string } {
  for (let at = 0; at + 5 <= body.length; ) {
    const length = body.readUInt32BE(at + 1);
    if (body[at] === 0x80) {
      const lines = body
        .subarray(at + 5, at + 5 + length)
        .toString("latin1")
        .split("\r\n");
      const value = (name: string) =>
        lines
          .find((l) => l.startsWith(`${name}:`))
          ?.slice(name.length + 1)
          .trim() ?? "";
      return { status: Number(value("grpc-status")), message: decodeURIComponent(value("grpc-message")) };
    }
    at += 5 + length;
  }
  throw new Error("no trailer frame");
}

describe("a unary request message that is not valid protobuf", () => {
  it("is INVALID_ARGUMENT over gRPC, for the inference service and health", async () => {
    const { grpcUrl } = await startServer();
    expect(await grpcCall(grpcUrl, `${SERVICE}/ServerMetadata`, CUT_SHORT)).toMatchObject({
      status: 3,
      message: "unable to parse the ServerMetadataRequest message: not a valid protobuf encoding",
    });
    expect(await grpcCall(grpcUrl, `${SERVICE}/RepositoryIndex`, CUT_SHORT)).toMatchObject({
      status: 3,
      message: "unable to parse the RepositoryIndexRequest message: not a valid protobuf encoding",
    });
    expect(await grpcCall(grpcUrl, "/grpc.health.v1.Health/Check", CUT_SHORT)).toMatchObject({
      status: 3,
      message: "unable to parse the HealthCheckRequest message: not a valid protobuf encoding",
    });
  });

  it("is INVALID_ARGUMENT over gRPC-Web, ModelInfer included", async () => {
    const { grpcUrl } = await startServer();
    for (const [rpc, type] of [
      ["ModelInfer", "ModelInferRequest"],
      ["ServerMetadata", "ServerMetadataRequest"],
    ]) {
      const reply = await post(grpcUrl, `${SERVICE}/${rpc}`, "application/grpc-web+proto", frame(CUT_SHORT));
      expect(reply.httpStatus).toBe(200);
      expect(grpcWebStatus(reply.body)).toEqual({
        status: 3,
        message: `unable to parse the ${type} message: not a valid protobuf encoding`,
      });
    }
  });

  it("is invalid_argument, HTTP 400, over the Connect protocol, with a body that matches its Content-Length; other errors pass as they are", async () => {
    const { grpcUrl } = await startServer();
    const reply = await post(grpcUrl, `${SERVICE}/ModelMetadata`, "application/proto", CUT_SHORT);
    expect(reply.httpStatus).toBe(400);
    expect(Number(reply.headers["content-length"])).toBe(reply.body.byteLength);
    expect(JSON.parse(reply.body.toString("utf8"))).toEqual({
      code: "invalid_argument",
      message: "unable to parse the ModelMetadataRequest message: not a valid protobuf encoding",
    });
    // Other errors pass as connect-node wrote them: ModelMetadataRequest{name: "nope"}.
    const unknown = await post(
      grpcUrl,
      `${SERVICE}/ModelMetadata`,
      "application/proto",
      Uint8Array.from([0x0a, 0x04, ...Buffer.from("nope")]),
    );
    expect(unknown.httpStatus).toBe(404);
    expect(JSON.parse(unknown.body.toString("utf8"))).toEqual({
      code: "not_found",
      message: "Request for unknown model: 'nope' is not found",
    });
  });
});
