// Where a ModelInfer input's data comes from (raw_input_contents, typed contents or shared
// memory), checked input by input in Triton's order (InferGRPCToInput in Triton's
// src/grpc/infer_handler.cc), with the same answer on the lean path (plain gRPC) and on
// connect-node's (gRPC-Web and Connect).
import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService, ModelInferRequestSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { grpcCall } from "./grpc-wire.js";
import { cleanup, int32Bytes, range, startServer } from "./support/harness.js";

afterEach(cleanup);

type InferInit = MessageInitShape<typeof ModelInferRequestSchema>;

const A = range(16);
const B = range(16).map((i) => 2 * i);
const SHAPE = [1n, 16n];

/** Each way a ModelInfer reaches the server, answering `{ code, message }` or the response. */
async function callEveryWay(grpcUrl: string, request: InferInit) {
  const web = createClient(GRPCInferenceService, createGrpcWebTransport({ baseUrl: grpcUrl, httpVersion: "2" }));
  const connect = createClient(GRPCInferenceService, createConnectTransport({ baseUrl: grpcUrl, httpVersion: "2" }));
  const viaConnectNode = async (call: Promise<unknown>) => {
    try {
      await call;
      return { code: 0, message: "" };
    } catch (error) {
      const e = error as { code: number; rawMessage: string };
      return { code: e.code, message: e.rawMessage };
    }
  };
  const lean = await grpcCall(
    grpcUrl,
    "/inference.GRPCInferenceService/ModelInfer",
    toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, request)),
  );
  return {
    lean: { code: lean.status, message: lean.message },
    grpcWeb: await viaConnectNode(web.modelInfer(request)),
    connect: await viaConnectNode(connect.modelInfer(request)),
  };
}

function everyWay(code: number, message: string) {
  return { lean: { code, message }, grpcWeb: { code, message }, connect: { code, message } };
}

describe("ModelInfer input data, input by input", () => {
  it("refuses typed contents beside raw_input_contents for the input that has them, before counting raw buffers", async () => {
    const { grpcUrl } = await startServer();
    const contentsFirst = await callEveryWay(grpcUrl, {
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: SHAPE, contents: { intContents: A } },
        { name: "INPUT1", datatype: "INT32", shape: SHAPE },
      ],
      rawInputContents: [int32Bytes(B)],
    });
    expect(contentsFirst).toEqual(
      everyWay(
        Code.InvalidArgument,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
      ),
    );
    const rawFirst = await callEveryWay(grpcUrl, {
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: SHAPE },
        { name: "INPUT1", datatype: "INT32", shape: SHAPE, contents: { intContents: B } },
      ],
      rawInputContents: [int32Bytes(A)],
    });
    expect(rawFirst).toEqual(
      everyWay(
        Code.InvalidArgument,
        "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'simple'",
      ),
    );
  });

  it("counts an empty contents message as contents, as protobuf's has_contents() does", async () => {
    const { grpcUrl } = await startServer();
    const answers = await callEveryWay(grpcUrl, {
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: SHAPE },
        { name: "INPUT1", datatype: "INT32", shape: SHAPE, contents: {} },
      ],
      rawInputContents: [int32Bytes(A)],
    });
    expect(answers).toEqual(
      everyWay(
        Code.InvalidArgument,
        "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'simple'",
      ),
    );
  });

  it("gives raw buffers to the inputs without contents in order, and names the first input left without data", async () => {
    const { grpcUrl } = await startServer();
    const short = await callEveryWay(grpcUrl, {
      modelName: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: SHAPE },
        { name: "INPUT1", datatype: "INT32", shape: SHAPE },
      ],
      rawInputContents: [int32Bytes(A)],
    });
    expect(short).toEqual(
      everyWay(Code.InvalidArgument, "unable to find data for input tensor 'INPUT1' for model 'simple' in request."),
    );
  });

  it("refuses typed contents on an input that names a shared-memory region", async () => {
    const { grpcUrl } = await startServer({ allowClientShm: true });
    const answers = await callEveryWay(grpcUrl, {
      modelName: "simple",
      inputs: [
        {
          name: "INPUT0",
          datatype: "INT32",
          shape: SHAPE,
          contents: { intContents: A },
          parameters: {
            shared_memory_region: { parameterChoice: { case: "stringParam", value: "r" } },
            shared_memory_byte_size: { parameterChoice: { case: "int64Param", value: 64n } },
          },
        },
        { name: "INPUT1", datatype: "INT32", shape: SHAPE, contents: { intContents: B } },
      ],
    });
    expect(answers).toEqual(
      everyWay(
        Code.InvalidArgument,
        "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'",
      ),
    );
  });
});
