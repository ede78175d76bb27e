// Client strings echoed in error texts are bounded (base/errors.ts): a 100 KB model or region name
// no longer overflows the gRPC trailers (the client saw INTERNAL, RST_STREAM code 6, instead of
// Triton's code), on the lean ModelInfer and ModelStreamInfer paths and through connect-node, and
// REST answers carry the same bounded text. Names of normal length keep Triton's texts.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { InferParameterSchema, ModelInferRequestSchema, ModelStreamInferResponseSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { ECHO_LIMIT, TEXT_ECHO_LIMIT } from "../src/base/errors.js";
import { frame, rawGrpc } from "./grpc-wire.js";
import { cleanup, expectGrpcError, range, simpleRequest, startServer } from "./support/harness.js";

afterEach(cleanup);

const LONG = "m".repeat(100 * 1024);
/** What the error texts show of {@link LONG}. */
const SHOWN = `${"m".repeat(ECHO_LIMIT)}...[${LONG.length} characters]`;

function infer(model: string): Buffer {
  return frame(
    toBinary(
      ModelInferRequestSchema,
      create(ModelInferRequestSchema, { ...simpleRequest(range(16), range(16)), modelName: model }),
    ),
  );
}

const start = () => startServer({ controlMode: "explicit", loadModels: ["simple"], http: true });

describe("client strings in error texts", () => {
  it("ModelInfer (lean path) answers a 100 KB model name NOT_FOUND with the name cut short", async () => {
    const { grpcUrl } = await start();
    const reply = await rawGrpc(grpcUrl, "/inference.GRPCInferenceService/ModelInfer", [infer(LONG)]);
    expect(reply.status).toBe(Code.NotFound);
    expect(reply.message).toBe(`Request for unknown model: '${SHOWN}' is not found`);
  });

  it("ModelStreamInfer (lean path) reports it in the stream, or in the trailers with triton_grpc_error", async () => {
    const { grpcUrl } = await start();
    const path = "/inference.GRPCInferenceService/ModelStreamInfer";
    const inStream = await rawGrpc(grpcUrl, path, [infer(LONG), infer("simple")]);
    expect(inStream.status).toBe(0);
    const responses = inStream.messages.map((m) => fromBinary(ModelStreamInferResponseSchema, m));
    expect(responses[0]?.errorMessage).toBe(`Request for unknown model: '${SHOWN}' is not found`);
    expect(responses[1]?.inferResponse?.modelName).toBe("simple");
    const inTrailers = await rawGrpc(grpcUrl, path, [infer(LONG)], { headers: { triton_grpc_error: "true" } });
    expect(inTrailers.status).toBe(Code.NotFound);
    expect(inTrailers.message).toBe(`Request for unknown model: '${SHOWN}' is not found`);
  });

  it("bounds a text that holds a client's string (a 100 KB parameter name) so that it fits too", async () => {
    const { grpcUrl } = await start();
    const request = create(ModelInferRequestSchema, simpleRequest(range(16), range(16)));
    request.parameters[LONG] = create(InferParameterSchema, { parameterChoice: { case: "uint64Param", value: 1n } });
    const reply = await rawGrpc(grpcUrl, "/inference.GRPCInferenceService/ModelInfer", [
      frame(toBinary(ModelInferRequestSchema, request)),
    ]);
    expect(reply.status).toBe(Code.InvalidArgument);
    const text = `unsupported parameter type for '${LONG}': uint64_param`;
    expect(reply.message).toBe(`${text.slice(0, TEXT_ECHO_LIMIT)}...[${text.length} characters]`);
  });

  it("connect-node RPCs answer a 100 KB model or region name with Triton's code", async () => {
    const { client } = await start();
    const notFound = `Request for unknown model: '${SHOWN}' is not found`;
    await expectGrpcError(client.modelMetadata({ name: LONG }), Code.NotFound, notFound);
    await expectGrpcError(client.modelConfig({ name: LONG }), Code.NotFound, notFound);
    await expectGrpcError(
      client.systemSharedMemoryStatus({ name: LONG }),
      Code.NotFound,
      `Unable to find system shared memory region: '${SHOWN}'`,
    );
    await expectGrpcError(
      client.cudaSharedMemoryStatus({ name: LONG }),
      Code.NotFound,
      `Unable to find cuda shared memory region: '${SHOWN}'`,
    );
  });

  it("keeps a name at the limit whole, and cuts REST's texts the same way", async () => {
    const { client, httpUrl } = await start();
    const edge = "e".repeat(ECHO_LIMIT);
    await expectGrpcError(
      client.modelMetadata({ name: edge }),
      Code.NotFound,
      `Request for unknown model: '${edge}' is not found`,
    );
    const body = JSON.stringify({
      inputs: [{ name: LONG, shape: [1, 16], datatype: "INT32", data: range(16) }],
    });
    const response = await fetch(`${httpUrl}/v2/models/simple/infer`, { method: "POST", body });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: `[request id: <id_unknown>] unexpected inference input '${SHOWN}' for model 'simple'`,
    });
  });
});
